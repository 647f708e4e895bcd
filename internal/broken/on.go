//go:build leasehold_broken

package broken

// Built reports whether this build carries the broken variants: it does,
// with the leasehold_broken build tag.
const Built = true

// On reports whether v is switched on by LEASEHOLD_BROKEN.
func On(v Variant) bool { return switchedOn(v) }

//go:build !leasehold_broken

package broken

// Built reports whether this build carries the broken variants: not
// without the leasehold_broken build tag.
const Built = false

// On reports whether v is switched on: never in this build.
func On(Variant) bool { return false }

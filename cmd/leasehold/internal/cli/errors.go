package cli

import (
	"errors"

	"github.com/leasehold/leasehold/model"
)

// isInvalidInput reports whether err is the queue's refusal of bad input.
func isInvalidInput(err error) bool { return errors.Is(err, model.ErrInvalidInput) }

package model

// LimitsChange changes some of the queue-wide limits: each field set
// replaces its limit, and the limits it leaves nil stay as they are. It is
// what PUT /v1/limits and the limits command take, so that naming one
// limit never resets the others.
type LimitsChange struct {
	DepthMax       *int
	UserDepthMax   *int
	UserRunningMax *int
	AttemptsMax    *int
	GrantCostMax   *int64
	GrantStepsMax  *int
	ClaimBatchMax  *int
}

// Empty reports whether c names no limit.
func (c LimitsChange) Empty() bool { return c == LimitsChange{} }

// Apply returns l with the limits c names replaced.
func (c LimitsChange) Apply(l Limits) Limits {
	for _, f := range []struct {
		from *int
		to   *int
	}{{c.DepthMax, &l.DepthMax}, {c.UserDepthMax, &l.UserDepthMax}, {c.UserRunningMax, &l.UserRunningMax},
		{c.AttemptsMax, &l.AttemptsMax}, {c.GrantStepsMax, &l.GrantStepsMax}, {c.ClaimBatchMax, &l.ClaimBatchMax}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if c.GrantCostMax != nil {
		l.GrantCostMax = *c.GrantCostMax
	}
	return l
}

// UserLimitChange changes some of one user's limits; a field left nil
// keeps the user's current override (Inherit where there is none).
type UserLimitChange struct {
	RunningMax *int
	DepthMax   *int
}

// Empty reports whether c names no limit.
func (c UserLimitChange) Empty() bool { return c == UserLimitChange{} }

// Apply returns u with the limits c names replaced.
func (c UserLimitChange) Apply(u UserLimit) UserLimit {
	if c.RunningMax != nil {
		u.RunningMax = *c.RunningMax
	}
	if c.DepthMax != nil {
		u.DepthMax = *c.DepthMax
	}
	return u
}

// UserLimitOf returns user's override among users, or one inheriting both
// limits when user has none.
func UserLimitOf(users []UserLimit, user string) UserLimit {
	for _, u := range users {
		if u.User == user {
			return u
		}
	}
	return UserLimit{User: user, RunningMax: Inherit, DepthMax: Inherit}
}

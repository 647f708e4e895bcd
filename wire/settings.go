package wire

import (
	"encoding/json"

	"github.com/leasehold/leasehold/model"
)

// Limits are the queue-wide limits on the wire (model.Limits): snake_case,
// the names their validation errors use.
type Limits struct {
	DepthMax       int   `json:"depth_max"`
	UserDepthMax   int   `json:"user_depth_max"`
	UserRunningMax int   `json:"user_running_max"`
	AttemptsMax    int   `json:"attempts_max"`
	GrantCostMax   int64 `json:"grant_cost_max"`
	GrantStepsMax  int   `json:"grant_steps_max"`
	ClaimBatchMax  int   `json:"claim_batch_max"`
}

// LimitsChange names the queue-wide limits to change (PUT /v1/limits,
// model.LimitsChange): each field set replaces its limit; a nil field
// leaves its limit as it is.
type LimitsChange struct {
	DepthMax       *int   `json:"depth_max,omitempty"`
	UserDepthMax   *int   `json:"user_depth_max,omitempty"`
	UserRunningMax *int   `json:"user_running_max,omitempty"`
	AttemptsMax    *int   `json:"attempts_max,omitempty"`
	GrantCostMax   *int64 `json:"grant_cost_max,omitempty"`
	GrantStepsMax  *int   `json:"grant_steps_max,omitempty"`
	ClaimBatchMax  *int   `json:"claim_batch_max,omitempty"`
}

// UserLimit is one user's override (model.UserLimit); model.Inherit (-1)
// inherits the queue-wide limit, 0 is unlimited.
type UserLimit struct {
	User       string `json:"user"`
	RunningMax int    `json:"running_max"`
	DepthMax   int    `json:"depth_max"`
}

// UserLimitChange names a user's limits to change (PUT
// /v1/limits/users/{user}, model.UserLimitChange); a nil field keeps the
// user's override (or inherits).
type UserLimitChange struct {
	RunningMax *int `json:"running_max,omitempty"`
	DepthMax   *int `json:"depth_max,omitempty"`
}

// LimitsView is the queue-wide limits and the users' overrides (GET
// /v1/limits, limits --json).
type LimitsView struct {
	Limits Limits      `json:"limits"`
	Users  []UserLimit `json:"users"`
}

// LimitsViewOf is the stored limits and the per-user overrides.
func LimitsViewOf(limits model.Limits, users []model.UserLimit) LimitsView {
	return LimitsView{Limits: Limits(limits), Users: All(users, func(u model.UserLimit) UserLimit { return UserLimit(u) })}
}

// Schedule is a schedule on the wire.
type Schedule struct {
	ID         string          `json:"id"`
	User       string          `json:"user"`
	Kind       string          `json:"kind"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority"`
	Origin     Time            `json:"origin"`
	PeriodMs   int64           `json:"period_ms"`
	LastRun    int64           `json:"last_run"`
	CreatedAt  Time            `json:"created_at"`
}

// ScheduleOf is s's record.
func ScheduleOf(s model.Schedule) Schedule {
	return Schedule{ID: s.ID, User: s.User, Kind: s.Kind, Payload: json.RawMessage(s.Payload), CostBudget: s.CostBudget,
		StepsMax: s.StepsMax, Priority: s.Priority, Origin: TimeOf(s.Origin), PeriodMs: s.Period.Milliseconds(),
		LastRun: s.LastRun, CreatedAt: TimeOf(s.CreatedAt)}
}

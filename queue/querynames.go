package queue

// queryName names a statement of a store's SQL files (a "-- name: NAME"
// section). The protocol runs statements by these values only, so a name
// that no file defines is a compile error, not a failure at run time;
// TestQueryNamesAreDefined holds every value to a section of the files of
// the stores it is declared for, and every section to a value.
type queryName struct{ name string }

// String returns the section's name.
func (n queryName) String() string { return n.name }

// The statements both stores define.
var (
	qActiveTotal            = queryName{"active_total"}
	qAuditAll               = queryName{"audit_all"}
	qAuditByActor           = queryName{"audit_by_actor"}
	qAuditByTask            = queryName{"audit_by_task"}
	qAuditByTime            = queryName{"audit_by_time"}
	qCancelRequest          = queryName{"cancel_request"}
	qClaimAny               = queryName{"claim_any"}
	qCompleteBatch          = queryName{"complete_batch"}
	qCompleteFenced         = queryName{"complete_fenced"}
	qCountersCheck          = queryName{"counters_check"}
	qEffectByOp             = queryName{"effect_by_op"}
	qEffectDelete           = queryName{"effect_delete"}
	qEffectInsert           = queryName{"effect_insert"}
	qEffectReceipt          = queryName{"effect_receipt"}
	qEffectsAll             = queryName{"effects_all"}
	qEffectsByTask          = queryName{"effects_by_task"}
	qEngineVersion          = queryName{"engine_version"}
	qEventInsert            = queryName{"event_insert"}
	qEventInsertBatch       = queryName{"event_insert_batch"}
	qEventsAfter            = queryName{"events_after"}
	qEventsAll              = queryName{"events_all"}
	qEventsByTask           = queryName{"events_by_task"}
	qEventsInsert           = queryName{"events_insert"}
	qGroupRollback          = queryName{"group_rollback"}
	qGroupSavepoint         = queryName{"group_savepoint"}
	qHealth                 = queryName{"health"}
	qHeartbeat              = queryName{"heartbeat"}
	qListAll                = queryName{"list_all"}
	qListByState            = queryName{"list_by_state"}
	qListByUser             = queryName{"list_by_user"}
	qListByUserState        = queryName{"list_by_user_state"}
	qListPage               = queryName{"list_page"}
	qListPageByUser         = queryName{"list_page_by_user"}
	qListPageByUserNewest   = queryName{"list_page_by_user_newest"}
	qListPageForUsers       = queryName{"list_page_for_users"}
	qListPageForUsersNewest = queryName{"list_page_for_users_newest"}
	qListPageNewest         = queryName{"list_page_newest"}
	qMigrationRecord        = queryName{"migration_record"}
	qMigrationsApplied      = queryName{"migrations_applied"}
	qMigrationsTable        = queryName{"migrations_table"}
	qMigrationsTableExists  = queryName{"migrations_table_exists"}
	qOldestQueued           = queryName{"oldest_queued"}
	qPauseApply             = queryName{"pause_apply"}
	qPruneCountRest         = queryName{"prune_count_rest"}
	qPruneCountTasks        = queryName{"prune_count_tasks"}
	qPruneEffects           = queryName{"prune_effects"}
	qPruneEventInsert       = queryName{"prune_event_insert"}
	qPruneEvents            = queryName{"prune_events"}
	qPruneEventsTop         = queryName{"prune_events_top"}
	qPruneExpire            = queryName{"prune_expire"}
	qPruneExpiredAny        = queryName{"prune_expired_any"}
	qPruneGateClose         = queryName{"prune_gate_close"}
	qPruneGateOpen          = queryName{"prune_gate_open"}
	qPruneKept              = queryName{"prune_kept"}
	qPruneScan              = queryName{"prune_scan"}
	qPruneTake              = queryName{"prune_take"}
	qPruneTasks             = queryName{"prune_tasks"}
	qPruneTombstones        = queryName{"prune_tombstones"}
	qReapAny                = queryName{"reap_any"}
	qReapDeadlines          = queryName{"reap_deadlines"}
	qReapLeases             = queryName{"reap_leases"}
	qSavepoint              = queryName{"savepoint"}
	qSavepointRelease       = queryName{"savepoint_release"}
	qSavepointRollback      = queryName{"savepoint_rollback"}
	qScheduleCount          = queryName{"schedule_count"}
	qScheduleDelete         = queryName{"schedule_delete"}
	qScheduleInsert         = queryName{"schedule_insert"}
	qScheduleRan            = queryName{"schedule_ran"}
	qSchedulesAll           = queryName{"schedules_all"}
	qSchemaVersion          = queryName{"schema_version"}
	qSessionSettings        = queryName{"session_settings"}
	qSettingSet             = queryName{"setting_set"}
	qSettingsAll            = queryName{"settings_all"}
	qSettle                 = queryName{"settle"}
	qStepApply              = queryName{"step_apply"}
	qTalliesAll             = queryName{"tallies_all"}
	qTaskByID               = queryName{"task_by_id"}
	qTaskByKey              = queryName{"task_by_key"}
	qTaskByUserKey          = queryName{"task_by_user_key"}
	qTaskInsert             = queryName{"task_insert"}
	qTaskLastEventSeq       = queryName{"task_last_event_seq"}
	qTasksByKeys            = queryName{"tasks_by_keys"}
	qTasksInsert            = queryName{"tasks_insert"}
	qTouch                  = queryName{"touch"}
	qTrailAfter             = queryName{"trail_after"}
	qTrailAfterForUsers     = queryName{"trail_after_for_users"}
	qTrailByTaskAfter       = queryName{"trail_by_task_after"}
	qTrailThrough           = queryName{"trail_through"}
	qUserDepth              = queryName{"user_depth"}
	qUserEnsure             = queryName{"user_ensure"}
	qUserLimitSet           = queryName{"user_limit_set"}
	qUserLimits             = queryName{"user_limits"}
	qUsersDepth             = queryName{"users_depth"}
	qUsersEnsure            = queryName{"users_ensure"}
)

// The statements only PostgreSQL's files define.
var (
	qClaimBatch           = queryName{"claim_batch"}
	qCompleteAndClaim     = queryName{"complete_and_claim"}
	qEventsAfterLock      = queryName{"events_after_lock"}
	qFunctionsApplied     = queryName{"functions_applied"}
	qFunctionsRecord      = queryName{"functions_record"}
	qFunctionsTable       = queryName{"functions_table"}
	qFunctionsTableExists = queryName{"functions_table_exists"}
	qMigrationsForget     = queryName{"migrations_forget"}
	qMigrationsLock       = queryName{"migrations_lock"}
	qReadyListen          = queryName{"ready_listen"}
	qReadyNotify          = queryName{"ready_notify"}
	qReadySchema          = queryName{"ready_schema"}
	qSubmitOne            = queryName{"submit_one"}
	qTallyCompact         = queryName{"tally_compact"}
	qTallyRows            = queryName{"tally_rows"}
)

// The statements only SQLite's files define.
var (
	qClaimNext   = queryName{"claim_next"}
	qClaimRoom   = queryName{"claim_room"}
	qClaimTask   = queryName{"claim_task"}
	qClaimTasks  = queryName{"claim_tasks"}
	qReblockAll  = queryName{"reblock_all"}
	qReblockUser = queryName{"reblock_user"}
	qWalTruncate = queryName{"wal_truncate"}
)

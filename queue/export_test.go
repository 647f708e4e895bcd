package queue

import "database/sql"

// DBOf returns q's database handle, for the external tests that read or
// change rows no part of the API reaches.
func DBOf(q *Queue) *sql.DB { return q.db }

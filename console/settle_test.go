package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// lostService loses every response: the outcome of each call is unknown,
// and it cannot be asked.
type lostService struct{}

func (lostService) Kind() worker.ServiceKind { return worker.Plain }

func (lostService) Call(context.Context, worker.Call) (string, error) {
	return "", errors.New("connection reset after the request was sent")
}

func (lostService) Status(context.Context, string, int64) (bool, string, error) {
	return false, "", worker.ErrNoStatus
}

func TestSettleAnUncertainEffect(t *testing.T) {
	b := setup(t)
	w, err := worker.New(worker.Config{ID: "w2", Queue: b.q, Handler: worker.Synthetic{}, Service: lostService{}, Clock: b.clock})
	require.NoError(t, err)
	b.w = w
	id := b.submit(t, "ana", "charge", `{"steps": [{"cost": 1, "effect": "charge"}]}`)
	parked := b.drive(t, id, model.NeedsReview)
	require.Equal(t, model.UncertainEffect, parked.Reason)
	op := model.OperationID(id, 0)

	// A submitter sees the unknown outcome but no settle form.
	ana := b.client(t)
	ana.signIn(anaSecret)
	page := ana.get(taskPath(id))
	require.Contains(t, page.body, "none: outcome unknown")
	require.NotContains(t, page.body, "/settle")

	op1 := b.client(t)
	op1.signIn(operatorSecret)
	page = op1.get(taskPath(id))
	require.Contains(t, page.body, `action="/ui/tasks/`+id+`/settle"`)
	before := b.eventCount(t)
	res := op1.form(taskPath(id), taskPath(id)+"/settle", url.Values{"op": {op}, "applied": {"maybe"}})
	require.Equal(t, http.StatusBadRequest, res.status)
	res = op1.form(taskPath(id), taskPath(id)+"/settle", url.Values{"op": {"t_00.s0"}, "applied": {"true"}})
	require.Equal(t, http.StatusBadRequest, res.status, "an operation of another task")
	require.Equal(t, before, b.eventCount(t))

	res = op1.form(taskPath(id), taskPath(id)+"/settle", url.Values{"op": {op}, "applied": {"true"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	effects, err := b.q.Effects(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, effects, 1)
	require.True(t, effects[0].Receipted())
	require.Equal(t, "operator", effects[0].ReceiptBy)
	page = op1.get(taskPath(id))
	require.Contains(t, page.body, "settled by operator")
}

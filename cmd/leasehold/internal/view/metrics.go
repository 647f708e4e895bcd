package view

import (
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// Metrics is the metrics snapshot on the wire (metrics --json, the demo's
// samples): the API's record (GET /v1/metrics).
type Metrics = wire.Metrics

// Histogram is a model.Histogram on the wire.
type Histogram = wire.Histogram

// MetricsOf is m's record, its counts by kind naming kinds and every
// other kind as other (wire.FoldKinds).
func MetricsOf(m model.Metrics, kinds []string) Metrics {
	return wire.MetricsOf(m, kinds)
}

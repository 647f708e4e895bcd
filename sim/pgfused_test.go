package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
)

// The cells a PostgreSQL store adds to a scenario's declared ones name
// fused statements under fault kinds the simulator reaches, each once;
// SQLite adds none; and every scenario fusedDeclared names exists.
func TestPostgresDeclaredCellsAreKnown(t *testing.T) {
	pg := Store{pg: &pgStore{}}
	for name := range fusedDeclared {
		_, err := scenarios.Get(name)
		require.NoError(t, err, "fusedDeclared names scenario %s", name)
	}
	for _, name := range scenarios.Names() {
		sc, err := scenarios.Get(name)
		require.NoError(t, err)
		require.Equal(t, sc.Covers, Store{}.Declared(sc).Covers, "sqlite adds no cells to %s", name)
		declared := pg.Declared(sc)
		require.Equal(t, sc.Covers, declared.Covers[:len(sc.Covers)], "postgres keeps %s's own cells first", name)
		seen := map[scenarios.Cell]bool{}
		for _, cell := range declared.Covers {
			require.True(t, KnownCell(cell), "scenario %s on postgres declares %s, which names nothing the simulator reaches", name, cell)
			require.False(t, seen[cell], "scenario %s on postgres declares %s twice", name, cell)
			seen[cell] = true
		}
	}
	portfolio := pg.Declared(scenarios.Portfolio())
	for _, kind := range FusedFaultKinds() {
		require.Contains(t, portfolio.Covers, scenarios.FaultCell(kind, StatementSubmitOne))
	}
	require.NotContains(t, scenarios.Portfolio().Covers, scenarios.FaultCell(FusedFaultKinds()[0], StatementSubmitOne),
		"Declared does not change the scenario it was given")
}

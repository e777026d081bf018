package cluster

import "log/slog"

var quiet = slog.New(slog.DiscardHandler)

// allUp reports whether each of ms sees exactly ms, all up and reachable, converged.
func allUp(ms []*Membership) bool {
	for _, m := range ms {
		v := m.View()
		if !v.Converged || len(v.Members) != len(ms) {
			return false
		}
		for _, mem := range v.Members {
			if mem.Status != StatusUp || !mem.Reachable {
				return false
			}
		}
	}
	return true
}

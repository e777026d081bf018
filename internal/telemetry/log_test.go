package telemetry

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogHandlerNeverPrintsAZeroTime: a zero time attribute, alone, in a group or given
// through With, is written as "never" in either format; other times are left alone.
func TestLogHandlerNeverPrintsAZeroTime(t *testing.T) {
	when := time.Date(2026, 11, 28, 3, 4, 5, 0, time.UTC)
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		h, err := LogHandler(&buf, format, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		log := slog.New(h).With("since", time.Time{})
		log.Warn("lease lapsed", "contact", time.Time{}, slog.Group("g", "at", time.Time{}), "seen", when)
		got := buf.String()
		if strings.Contains(got, "0001-01-01") || strings.Count(got, "never") != 3 || !strings.Contains(got, "2026-11-28T03:04:05") {
			t.Errorf("%s: %s", format, got)
		}
	}
}

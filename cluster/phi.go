package cluster

import (
	"math"
	"time"
)

// PhiAccrualConfig configures a phi accrual failure detector (Hayashibara, Défago,
// Yared, Katayama: "The φ Accrual Failure Detector", SRDS 2004), with Akka's defaults.
type PhiAccrualConfig struct {
	// Threshold is the phi above which a member is unreachable. Default 8; 12 on
	// networks with hiccups.
	Threshold float64
	// MaxSampleSize is how many heartbeat intervals the history keeps. Default 1000.
	MaxSampleSize int
	// MinStdDeviation floors the standard deviation of intervals, so that a very
	// regular history does not make phi jump on a small delay. Default 100 ms.
	MinStdDeviation time.Duration
	// AcceptableHeartbeatPause is added to the mean interval: pauses up to it (GC,
	// network hiccups) do not raise phi much. Default 3 s.
	AcceptableHeartbeatPause time.Duration
	// FirstHeartbeatEstimate seeds the history before real intervals arrive. Default 1 s.
	FirstHeartbeatEstimate time.Duration
}

// DefaultPhiAccrualConfig returns the defaults described on PhiAccrualConfig.
func DefaultPhiAccrualConfig() PhiAccrualConfig {
	return PhiAccrualConfig{
		Threshold:                8,
		MaxSampleSize:            1000,
		MinStdDeviation:          100 * time.Millisecond,
		AcceptableHeartbeatPause: 3 * time.Second,
		FirstHeartbeatEstimate:   time.Second,
	}
}

// phiDetector is the failure detector of one monitored member. It is a pure value
// driven by the caller's clock: not safe for concurrent use.
type phiDetector struct {
	cfg       PhiAccrualConfig
	intervals []float64 // milliseconds, a ring of at most MaxSampleSize
	next      int
	sum, sum2 float64
	last      time.Time
}

func newPhiDetector(cfg PhiAccrualConfig) *phiDetector {
	return &phiDetector{cfg: cfg}
}

// heartbeat records a heartbeat that arrived at now. The interval since the previous
// one joins the history only if the member was available (phi under the threshold):
// the gap of an outage would distort the statistics (as Akka does).
func (d *phiDetector) heartbeat(now time.Time) {
	if d.last.IsZero() {
		// Seed: mean = first estimate, standard deviation = estimate / 4.
		est := float64(d.cfg.FirstHeartbeatEstimate) / float64(time.Millisecond)
		d.add(est - est/4)
		d.add(est + est/4)
	} else if d.available(now) {
		d.add(float64(now.Sub(d.last)) / float64(time.Millisecond))
	}
	d.last = now
}

func (d *phiDetector) add(ms float64) {
	if len(d.intervals) < d.cfg.MaxSampleSize {
		d.intervals = append(d.intervals, ms)
	} else {
		old := d.intervals[d.next]
		d.sum -= old
		d.sum2 -= old * old
		d.intervals[d.next] = ms
		d.next = (d.next + 1) % len(d.intervals)
	}
	d.sum += ms
	d.sum2 += ms * ms
}

// phi returns the suspicion level at now: -log10 of the probability that a heartbeat
// arrives later than now given the history, with the logistic approximation of the
// normal distribution's CDF that Akka uses. 0 before the first heartbeat.
func (d *phiDetector) phi(now time.Time) float64 {
	if d.last.IsZero() || len(d.intervals) == 0 {
		return 0
	}
	n := float64(len(d.intervals))
	mean := d.sum / n
	variance := d.sum2/n - mean*mean
	std := math.Sqrt(math.Max(variance, 0))
	std = math.Max(std, float64(d.cfg.MinStdDeviation)/float64(time.Millisecond))
	mean += float64(d.cfg.AcceptableHeartbeatPause) / float64(time.Millisecond)
	diff := float64(now.Sub(d.last)) / float64(time.Millisecond)
	y := (diff - mean) / std
	e := math.Exp(-y * (1.5976 + 0.070566*y*y))
	if diff > mean {
		return -math.Log10(e / (1 + e))
	}
	return -math.Log10(1 - 1/(1+e))
}

// available reports whether phi at now is under the threshold.
func (d *phiDetector) available(now time.Time) bool { return d.phi(now) < d.cfg.Threshold }

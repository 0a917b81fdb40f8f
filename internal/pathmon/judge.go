// SPDX-License-Identifier: Apache-2.0

package pathmon

import (
	"fmt"
	"math"
	"time"

	"github.com/edgeplane/edgeplane/internal/config"
)

// PathState is a path's state as its monitor judges it.
type PathState uint8

// Path states. A path starts unknown: no traffic is steered by a state
// nobody measured.
const (
	PathUnknown PathState = iota
	PathUp
	PathDegraded
	PathDown
)

var pathStateNames = [...]string{"unknown", "up", "degraded", "down"}

func (s PathState) String() string {
	if int(s) < len(pathStateNames) {
		return pathStateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// pathJudge turns a path's probe outcomes, in the order the probes were
// sent, and its measured RTT and jitter into a state (PathMonitor's
// rules), with the outcomes of the last Window probes for the loss.
type pathJudge struct {
	mon     config.PathMonitor // Effective
	window  []bool             // ring of the last outcomes: true answered
	onset   []bool             // beside it: unanswered after an answered one
	n, next int
	lost    int    // unanswered among the n in window
	onsets  int    // onsets among the n in window
	okRun   uint32 // answered in a row
	lostRun uint32 // unanswered in a row
	calm    uint32 // judgements in a row within the limits less the hysteresis
	state   PathState
}

func newPathJudge(mon config.PathMonitor) *pathJudge {
	return &pathJudge{mon: mon, window: make([]bool, mon.Window), onset: make([]bool, mon.Window)}
}

// add records one probe's outcome.
func (j *pathJudge) add(answered bool) {
	if j.n == len(j.window) {
		if !j.window[j.next] {
			j.lost--
		}
		if j.onset[j.next] {
			j.onsets--
		}
	} else {
		j.n++
	}
	j.window[j.next] = answered
	j.onset[j.next] = !answered && j.lostRun == 0 && j.n > 1
	if j.onset[j.next] {
		j.onsets++
	}
	j.next = (j.next + 1) % len(j.window)
	if answered {
		j.okRun++
		j.lostRun = 0
	} else {
		j.lost++
		j.lostRun++
		j.okRun = 0
	}
}

// loss is the share of the window's probes that went unanswered.
func (j *pathJudge) loss() float64 {
	if j.n == 0 {
		return 0
	}
	return float64(j.lost) / float64(j.n)
}

// downAfter is how many unanswered probes in a row take the path down:
// the configured number, or more on a path that loses probes at random
// anyway, so that its own random loss makes such a run rarer than once
// in 5,000 probes (at 10 probes a second, a false outage every ~8
// minutes at most; once in 1,000 made one in ten 5-second lab runs over
// two paths losing 10 % each way see a path go down). A clean path is
// down after DownAfter (2) whatever its loss up to 1.4 %; one losing
// 19 % of its probes (10 % each way) after 6, not after 2 with a 3.6 %
// chance at every probe. At most 4 × DownAfter.
//
// The random loss p is told from the onsets (a probe unanswered after an
// answered one), not from all the probes lost: random loss has p(1 - p)
// onsets a probe, an outage one however long it lasted, so an outage in
// the window does not slow the next one's detection.
// falseDownRate bounds how often a path's random loss alone may take it
// down: at most once in this many probes' time.
const falseDownRate = 1.0 / 5000

func (j *pathJudge) downAfter() uint32 {
	k := j.mon.DownAfter
	n, onsets := j.n-int(j.lostRun), j.onsets
	if j.lostRun > 0 && onsets > 0 {
		onsets-- // the current run's own
	}
	if n < 20 || onsets <= 0 {
		return k
	}
	o := min(float64(onsets)/float64(n), 0.25)
	p := (1 - math.Sqrt(1-4*o)) / 2
	for k < 4*j.mon.DownAfter && math.Pow(p, float64(k)) >= falseDownRate {
		k++
	}
	return k
}

// over names the first limit the measures are past, each limit scaled
// by scale (1, or 1 - hysteresis to come back); "" when none is.
func (j *pathJudge) over(srtt, jitter time.Duration, scale float64) string {
	m := j.mon
	switch {
	case m.MaxRTT.D > 0 && float64(srtt) > float64(m.MaxRTT.D)*scale:
		return fmt.Sprintf("RTT %s past %s", srtt.Round(10*time.Microsecond), time.Duration(float64(m.MaxRTT.D)*scale))
	case m.MaxJitter.D > 0 && float64(jitter) > float64(m.MaxJitter.D)*scale:
		return fmt.Sprintf("jitter %s past %s", jitter.Round(10*time.Microsecond), time.Duration(float64(m.MaxJitter.D)*scale))
	case m.MaxLoss.Set && j.loss() > m.MaxLoss.V*scale:
		return fmt.Sprintf("loss %.1f%% past %.1f%%", 100*j.loss(), 100*m.MaxLoss.V*scale)
	}
	return ""
}

// judge returns the path's state after the outcomes added so far, with
// the measures srtt and jitter, and why it is what it is when that
// changed ("" otherwise).
func (j *pathJudge) judge(srtt, jitter time.Duration) (PathState, string) {
	prev := j.state
	var why string
	switch {
	case j.lostRun >= j.downAfter():
		j.state, j.calm = PathDown, 0
		why = fmt.Sprintf("%d probes in a row unanswered", j.lostRun)
	case prev == PathUnknown || prev == PathDown:
		if j.okRun < j.mon.UpAfter {
			break
		}
		if o := j.over(srtt, jitter, 1); o != "" {
			j.state, why = PathDegraded, fmt.Sprintf("%d probes in a row answered, %s", j.okRun, o)
		} else {
			j.state, why = PathUp, fmt.Sprintf("%d probes in a row answered", j.okRun)
		}
	case prev == PathUp:
		if o := j.over(srtt, jitter, 1); o != "" {
			j.state, j.calm, why = PathDegraded, 0, o
		}
	case prev == PathDegraded:
		if j.over(srtt, jitter, 1-j.mon.Hysteresis.V) != "" {
			j.calm = 0
			break
		}
		if j.calm++; j.calm >= j.mon.UpAfter {
			j.state = PathUp
			why = fmt.Sprintf("within the limits less %.0f%% %d times in a row", 100*j.mon.Hysteresis.V, j.calm)
		}
	}
	if j.state == prev {
		why = ""
	}
	return j.state, why
}

package dist_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/runtime"
)

// scalerLog is a rank's loss scaler over a run: after each call of
// Step, the scale, the verdict and the counters.
type scalerLog struct {
	Scales   []float64
	Skipped  []bool
	Steps    []int
	Schedule []int
	Errors   []string // each step's error, "" for none
}

func (l *scalerLog) record(s *runtime.Session, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	l.Errors = append(l.Errors, msg)
	l.Scales = append(l.Scales, s.LossScale())
	l.Skipped = append(l.Skipped, s.StepSkipped())
	l.Steps = append(l.Steps, s.Steps())
	l.Schedule = append(l.Schedule, s.ScheduleSteps())
}

func (l *scalerLog) write(out string, rank int) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return os.WriteFile(fmt.Sprintf("%s.scaler.%d", out, rank), b, 0o644)
}

// readLogs reads the 2 ranks' scaler logs of a job writing to out.
func readLogs(t *testing.T, out string) [2]scalerLog {
	t.Helper()
	var logs [2]scalerLog
	for r := range logs {
		b, err := os.ReadFile(fmt.Sprintf("%s.scaler.%d", out, r))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &logs[r]); err != nil {
			t.Fatal(err)
		}
	}
	return logs
}

// TestDataParallelScalerAgrees: the MLP in f16 with loss scaling
// (generated/mlp_fp16) on 2 ranks, rank 1 alone feeding a batch holding
// +Inf at step 3 (its loss and gradients are NaN; rank 0's are finite).
// The ranks agree on the verdict before the update: both skip that
// step, back their scales off alike and advance the schedule's counter
// and not the step counter, and every step's scale and verdict and the
// final parameters are the same on both, bit for bit. With 2
// accumulation steps, the update the bad micro-batch belongs to is
// skipped on both.
func TestDataParallelScalerAgrees(t *testing.T) {
	for _, tc := range []struct {
		name         string
		accum, steps int
		skippedAt    int // the Step call (1-based) that ends the skipped update
	}{{"step", 0, 5, 3}, {"accumulate", 2, 8, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			j := job{Model: "mlp_fp16", Batch: 8, Steps: tc.steps, DataSeed: 9, TotalRows: 64, InfStep: 3, Accum: tc.accum,
				Out: filepath.Join(t.TempDir(), "params"), Timeout: time.Minute}
			if out, err := mpirun(t, 2, j, 2*time.Minute); err != nil {
				t.Fatalf("mpirun: %v\n%s", err, out)
			}
			logs := readLogs(t, j.Out)
			if !reflect.DeepEqual(logs[0], logs[1]) {
				t.Fatalf("the ranks' scalers differ:\nrank 0 %+v\nrank 1 %+v", logs[0], logs[1])
			}
			l, at := logs[0], tc.skippedAt-1
			k := max(tc.accum, 1)
			for i, sk := range l.Skipped {
				if (i+1)%k != 0 {
					continue // a micro-batch: the verdict is the update's
				}
				if sk != (i == at) {
					t.Errorf("call %d: skipped %v; want only call %d skipped (%+v)", i+1, sk, tc.skippedAt, l)
				}
			}
			updates := tc.steps / k
			if l.Steps[len(l.Steps)-1] != updates-1 || l.Schedule[len(l.Schedule)-1] != updates {
				t.Errorf("after %d updates, one skipped: steps %d (want %d), schedule %d (want %d)", updates, l.Steps[len(l.Steps)-1], updates-1, l.Schedule[len(l.Schedule)-1], updates)
			}
			if l.Scales[at] != l.Scales[at-1]/2 {
				t.Errorf("the scale went from %g to %g at the skip; want it halved", l.Scales[at-1], l.Scales[at])
			}
			p0, p1 := readParams(t, j.Out+".0"), readParams(t, j.Out+".1")
			if !reflect.DeepEqual(p0, p1) {
				t.Errorf("the ranks' parameters differ after the skip")
			}
		})
	}
}

// TestDataParallelVerdictAgreed: without a loss scaler, rank 1 alone
// feeds a label out of range at step 3 (the f32 MLP, whose gradients
// stay finite). Both ranks fail that step and commit nothing (rank 1
// with the label's error, rank 0 saying another rank failed), the step
// counters stay in step, and training goes on with identical replicas.
func TestDataParallelVerdictAgreed(t *testing.T) {
	j := job{Model: "mlp", Batch: 8, Steps: 5, DataSeed: 9, TotalRows: 64, BadLabelStep: 3,
		Out: filepath.Join(t.TempDir(), "params"), Timeout: time.Minute}
	if out, err := mpirun(t, 2, j, 2*time.Minute); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	logs := readLogs(t, j.Out)
	for r, l := range logs {
		for i, e := range l.Errors {
			if (e != "") != (i == 2) {
				t.Errorf("rank %d step %d: error %q; want one at step 3 only", r, i+1, e)
			}
		}
		if want := []int{1, 2, 2, 3, 4}; !reflect.DeepEqual(l.Steps, want) {
			t.Errorf("rank %d: step counters %v, want %v", r, l.Steps, want)
		}
	}
	if e := logs[1].Errors[2]; !strings.Contains(e, "out of range") {
		t.Errorf("rank 1's error %q: want the label's", e)
	}
	if e := logs[0].Errors[2]; !strings.Contains(e, "another rank of the data-parallel group failed step 3") {
		t.Errorf("rank 0's error %q: want the peer's failure", e)
	}
	if p0, p1 := readParams(t, j.Out+".0"), readParams(t, j.Out+".1"); !reflect.DeepEqual(p0, p1) {
		t.Errorf("the ranks' parameters differ after the failed step")
	}
}

package dist_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestBroadcastMakesReplicasIdentical: ranks seeded 100, 101, 102 hold
// rank 0's initial parameters, bit for bit, after SetCommunicator.
func TestBroadcastMakesReplicasIdentical(t *testing.T) {
	const np = 3
	j := job{Model: "mlp", Batch: 4, Steps: 0, DataSeed: 1, TotalRows: 12,
		Out: filepath.Join(t.TempDir(), "params"), Timeout: time.Minute}
	if out, err := mpirun(t, np, j, time.Minute); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	want := map[uint64]map[string][]float32{}
	for _, seed := range []uint64{100, 101} {
		m, err := newModel(dev, "mlp", 4, seed)
		if err != nil {
			t.Fatal(err)
		}
		if want[seed], err = train(m, nil, 0); err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	if want[100]["fc1.weight"][0] == want[101]["fc1.weight"][0] {
		t.Fatal("seeds 100 and 101 initialise alike: the test could not tell")
	}
	for r := 0; r < np; r++ {
		for name, p := range readParams(t, fmt.Sprintf("%s.%d", j.Out, r)) {
			for i := range p {
				if p[i] != want[100][name][i] {
					t.Fatalf("rank %d (seed %d) %s[%d] = %g, rank 0's seed gives %g", r, 100+r, name, i, p[i], want[100][name][i])
				}
			}
		}
	}
}

// TestKilledRankEndsJob: rank 1 is killed (SIGKILL) at step 3; the job
// must end non-zero well within the communicator's timeout, with a
// message naming rank 1.
func TestKilledRankEndsJob(t *testing.T) {
	const timeout = 20 * time.Second
	j := job{Model: "mlp", Batch: 4, Steps: 50, KillStep: 3, DataSeed: 1, TotalRows: 64, Timeout: timeout}
	start := time.Now()
	out, err := mpirun(t, 2, j, 2*time.Minute)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("mpirun exited 0 after rank 1 was killed:\n%s", out)
	}
	if !strings.Contains(out, "rank 1") {
		t.Fatalf("no message names rank 1:\n%s", out)
	}
	if took > timeout {
		t.Fatalf("the job took %v to end, over the %v timeout:\n%s", took, timeout, out)
	}
	t.Logf("ended in %v: %v\n%s", took.Round(time.Millisecond), err, out)
}

// TestHungRankTimesOut: rank 1 stops taking part at step 3 without dying;
// rank 0's all-reduce times out after 3 s with an error naming rank 0 and
// the operation, and aborts the job.
func TestHungRankTimesOut(t *testing.T) {
	const timeout = 3 * time.Second
	j := job{Model: "mlp", Batch: 4, Steps: 50, HangStep: 3, DataSeed: 1, TotalRows: 64, Timeout: timeout}
	start := time.Now()
	out, err := mpirun(t, 2, j, 2*time.Minute)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("mpirun exited 0 with rank 1 hung:\n%s", out)
	}
	if !strings.Contains(out, "rank 0 of 2") || !strings.Contains(out, "did not complete within 3s") {
		t.Fatalf("no timeout message naming rank 0:\n%s", out)
	}
	if took > timeout+30*time.Second {
		t.Fatalf("the job took %v to end with a %v timeout", took, timeout)
	}
	t.Logf("ended in %v\n%s", took.Round(time.Millisecond), out)
}

// TestMismatchedBatchDetected: rank 1 sized for batch 6 where rank 0 has
// 4: SetCommunicator fails on every rank, and the job ends non-zero.
func TestMismatchedBatchDetected(t *testing.T) {
	j := job{Model: "mlp", Batch: 4, BadBatch: 6, Steps: 2, DataSeed: 1, TotalRows: 64, Timeout: time.Minute}
	out, err := mpirun(t, 2, j, time.Minute)
	if err == nil {
		t.Fatalf("mpirun exited 0 with mismatched batches:\n%s", out)
	}
	if !strings.Contains(out, "rank 1 of 2 runs batch 6 and 1 accumulation steps where rank 0 has 4 and 1") &&
		!strings.Contains(out, "1 rank(s) run another model or batch size than rank 0") {
		t.Fatalf("no message about the mismatch:\n%s", out)
	}
}

// TestMismatchedModelDetected: rank 1 builds the ConvNet where rank 0
// builds the MLP: SetCommunicator fails on every rank.
func TestMismatchedModelDetected(t *testing.T) {
	j := job{Model: "mlp", BadModel: "convnet", Batch: 4, Steps: 2, DataSeed: 1, TotalRows: 64, Timeout: time.Minute}
	out, err := mpirun(t, 2, j, time.Minute)
	if err == nil {
		t.Fatalf("mpirun exited 0 with different models:\n%s", out)
	}
	if !strings.Contains(out, "rank 1 of 2 runs a different model (plan)") &&
		!strings.Contains(out, "1 rank(s) run another model or batch size than rank 0") {
		t.Fatalf("no message about the mismatch:\n%s", out)
	}
}

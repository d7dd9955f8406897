package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime/data"
)

// seqPeer is a sequence model's PyTorch peer (torch_step.py) as its
// benchmark runs it: TestLSTMVsTorch and TestTransformerVsTorch take
// their batch and length from here, and TestPeersRun runs the same
// command lines.
type seqPeer struct {
	model    string // torch_step.py --model (torch_models.seq_model)
	batch, T int    // T: the sequence length (the TransformerLM's src and tgt each)
}

var (
	lstmPeer        = seqPeer{"lstmbench", 32, 64}
	gptPeer         = seqPeer{"gpt", 16, 128}
	transformerPeer = seqPeer{"transformer", 16, 64}
)

// stepArgs is torch_step.py's command line for a peer of the given batch
// and model arguments, timing steps after warmup.
func stepArgs(batch, steps, warmup int, model []string) []string {
	return append([]string{"torch_step.py", "--threads", fmt.Sprint(*threads), "--batch", fmt.Sprint(batch),
		"--steps", fmt.Sprint(steps), "--warmup", fmt.Sprint(warmup)}, model...)
}

// tokenIDs draws random character ids (2 up to the vocabulary, past the
// padding and unknown ids) from its own seeded source: the benchmarks'
// sequence inputs, whose kernels and GEMMs do not depend on the values.
func tokenIDs() func(n int) []int32 {
	rng := rand.New(rand.NewPCG(1, 1))
	return func(n int) []int32 {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(2 + rng.IntN(data.CharVocab-2))
		}
		return v
	}
}

func (p seqPeer) args(steps, warmup int) []string {
	return stepArgs(p.batch, steps, warmup,
		[]string{"--model", p.model, "--vocab", fmt.Sprint(data.CharVocab), "--seq", fmt.Sprint(p.T)})
}

// caseArgs is c's peer command line (TestVsTorch's).
func (c benchCase) args(steps, warmup int) []string {
	return stepArgs(c.batch, steps, warmup, c.peerArgs())
}

// TestPeersRun runs every CPU benchmark's PyTorch peer for one step,
// with the command line its benchmark uses (image cases on Fashion-MNIST),
// so that a broken peer script fails the suite instead of the next
// measurement: torch_step.py --data once failed on every image case
// (issue 30) with no test noticing.
func TestPeersRun(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skipf("PyTorch is not installed for /usr/bin/python3 (scripts/setup.sh installs python3-torch): %v", err)
	}
	type peer struct {
		name   string
		args   []string
		images bool
	}
	var peers []peer
	for _, c := range cases {
		peers = append(peers, peer{c.name, c.args(1, 0), c.images})
	}
	for _, p := range []seqPeer{lstmPeer, gptPeer, transformerPeer} {
		peers = append(peers, peer{p.model, p.args(1, 0), false})
	}
	// TestGPUAMP's peers run under autocast (on the GPU; bf16 here).
	peers = append(peers, peer{"gpt_amp_bf16", append(gptPeer.args(1, 0), "--amp", "bf16"), false})
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(data.DefaultFashionMNISTDir); p.images && err != nil {
				t.Skipf("no Fashion-MNIST (scripts/setup.sh installs dataset-fashion-mnist): %v", err)
			}
			cmd := exec.Command("/usr/bin/python3", p.args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("python3 %s: %v\n%s", strings.Join(p.args, " "), err, stderr.String())
			}
			var r struct {
				peerResult
				Steps int    `json:"steps"`
				Model string `json:"model"`
			}
			if err := json.Unmarshal(out, &r); err != nil || r.Median <= 0 || r.Steps != 1 {
				t.Fatalf("python3 %s printed %q (%v)", strings.Join(p.args, " "), out, err)
			}
		})
	}
}

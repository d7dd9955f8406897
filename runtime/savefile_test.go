package runtime_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// saverEnv makes the test binary a checkpoint writer (TestSaveKilled's
// child): it trains the seed MLP and saves after every step, saying
// "begin N" and "end N" around the save of step N, and starting each save
// only when a byte arrives on its stdin, so the parent knows which save a
// kill can land in.
const saverEnv = "NGEN_TEST_SAVER"

func TestMain(m *testing.M) {
	if path := os.Getenv(saverEnv); path != "" {
		if err := saver(path); err != nil {
			fmt.Fprintln(os.Stderr, "saver:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(trainerEnv); spec != "" {
		if err := trainer(spec); err != nil {
			fmt.Fprintln(os.Stderr, "trainer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func saver(path string) error {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		return err
	}
	m, err := mlp.New(dev, mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		return err
	}
	if err := m.Load(bytes.NewReader(mustRead(path))); err != nil {
		return err
	}
	x, y := saverBatch()
	var go1 [1]byte
	for {
		if _, err := m.Step(x, y); err != nil {
			return err
		}
		n := m.Session().Steps()
		fmt.Printf("begin %d\n", n)
		if _, err := io.ReadFull(os.Stdin, go1[:]); err != nil {
			return nil // the parent is done with us
		}
		if err := m.Session().SaveFile(path); err != nil {
			return err
		}
		fmt.Printf("end %d\n", n)
	}
}

func mustRead(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return b
}

func saverBatch() ([]float32, []int32) {
	x := make([]float32, 4*784)
	for i := range x {
		x[i] = float32(i%13) / 13
	}
	return x, []int32{1, 7, 3, 0}
}

// stepOf loads a checkpoint into a fresh MLP (Load checks the SHA-256 of
// the whole file, so a partial file fails) and returns its step count.
func stepOf(t *testing.T, dev runtime.Device, b []byte) (int, error) {
	m, err := mlp.New(dev, mlp.Options{Batch: 4, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Load(bytes.NewReader(b)); err != nil {
		return 0, err
	}
	return m.Session().Steps(), nil
}

// TestSaveKilled (issue 27): a process saving checkpoints with
// Session.SaveFile is killed with SIGKILL at a random point of a save, 50
// times (about 30 s here; skipped with -short). Afterwards the path always
// holds a whole checkpoint that loads and checks out: the last one the
// process finished saving, or the one it was writing.
func TestSaveKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("50 processes killed while saving: about 30 s")
	}
	const trials = 50
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "mlp.ckpt")
	m, err := mlp.New(dev, mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Session().SaveFile(path); err != nil {
		t.Fatal(err)
	}
	m.Close()
	rng := rand.New(rand.NewPCG(27, 5))
	var saveTime time.Duration // of one save, from the first trial
	midSave := 0
	for trial := 0; trial < trials; trial++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), saverEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		// Let a random number of saves finish, then kill a random time
		// into the next one (or just after it, before the next step's
		// save may start).
		want := 1 + rng.IntN(3)
		last, writing, ends := -1, -1, 0
		var began time.Time
		for lines.Scan() {
			var n int
			switch f := strings.Fields(lines.Text()); {
			case len(f) == 2 && f[0] == "begin":
				n, _ = strconv.Atoi(f[1])
				writing, began = n, time.Now()
				if _, err := in.Write([]byte{1}); err != nil {
					t.Fatal(err)
				}
			case len(f) == 2 && f[0] == "end":
				n, _ = strconv.Atoi(f[1])
				last, writing = n, -1
				ends++
				if saveTime == 0 {
					saveTime = time.Since(began)
				}
			}
			if writing >= 0 && ends >= want {
				break
			}
		}
		if writing < 0 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("trial %d: the saver stopped: %s", trial, stderr.String())
		}
		time.Sleep(time.Duration(rng.Int64N(int64(max(saveTime*5/4, time.Millisecond)))))
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, out)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			// It finished the save and was killed in a later step, or
			// died otherwise; only SIGKILL is expected.
			if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
				t.Fatalf("trial %d: the saver died by %v", trial, ee.Sys().(syscall.WaitStatus).Signal())
			}
			t.Fatalf("trial %d: the saver ended with %v: %s", trial, err, stderr.String())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		got, err := stepOf(t, dev, b)
		if err != nil {
			t.Fatalf("trial %d: killed while saving step %d (last whole save: step %d): the file does not load: %v", trial, writing, last, err)
		}
		if got != writing && got != last {
			t.Fatalf("trial %d: the file holds step %d; the saver had finished step %d and was writing step %d", trial, got, last, writing)
		}
		if got != writing {
			midSave++
		}
	}
	// Some kills must have landed inside a save, else the test proves
	// little (each save fsyncs, so it takes a while).
	if midSave == 0 {
		t.Fatalf("none of %d kills left the previous checkpoint: none landed inside a save", trials)
	}
	t.Logf("%d of %d kills left the previous checkpoint, the rest the new one (a save took %v)", midSave, trials, saveTime)
	left, _ := filepath.Glob(filepath.Join(dir, ".mlp.ckpt.tmp-*"))
	t.Logf("%d temporary files left by killed saves", len(left))
}

// TestSaveFile: SaveFile writes through a temporary file it renames, keeps
// an existing file's permissions, and on an error from write leaves the
// old file and no temporary.
func TestSaveFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := runtime.SaveFile(path, func(w io.Writer) error { _, err := w.Write([]byte("one")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := runtime.SaveFile(path, func(w io.Writer) error { w.Write([]byte("tw")); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Fatalf("after a failed write the file holds %q", b)
	}
	if err := runtime.SaveFile(path, func(w io.Writer) error { _, err := w.Write([]byte("two")); return err }); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if b, _ := os.ReadFile(path); err != nil || string(b) != "two" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file %q mode %v (%v)", b, fi.Mode(), err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("directory holds %d entries, want the file alone", len(es))
	}
	if err := runtime.SaveFile(dir, func(io.Writer) error { return nil }); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory as the path: %v", err)
	}
	if err := runtime.SaveFile(filepath.Join(dir, "no", "such"), func(io.Writer) error { return nil }); err == nil {
		t.Fatal("a missing directory accepted")
	}
}

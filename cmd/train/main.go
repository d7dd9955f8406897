// Command train trains a generated ngen model on Fashion-MNIST: the
// README's main job. It prints a progress bar, the running loss, and the
// test accuracy and throughput after every epoch.
//
//	go run ./cmd/train -model mlp -epochs 5
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/ngen-ml/ngen/runtime"
	_ "github.com/ngen-ml/ngen/runtime/cpu" // the default backend
	"github.com/ngen-ml/ngen/runtime/data"
)

func main() {
	var (
		name    = flag.String("model", "mlp", "model to train: "+modelNames())
		epochs  = flag.Int("epochs", 5, "epochs")
		batch   = flag.Int("batch", 64, "batch size")
		seed    = flag.Uint64("seed", 1, "seed for initialisation, shuffling and dropout")
		threads = flag.Int("threads", 0, "CPU threads (0: all cores)")
		device  = flag.String("device", "cpu", "device: cpu, cuda or cuda:N (cuda needs -tags cuda)")
		dir     = flag.String("data", data.DefaultFashionMNISTDir, "Fashion-MNIST directory")
		save    = flag.String("save", "", "write a checkpoint here after training")
		quiet   = flag.Bool("quiet", false, "no progress bar")
		profile = flag.Bool("profile", false, "time every kernel and GEMM of the last epoch and print the table (synchronises after each)")
	)
	flag.Parse()
	if err := run(*name, *epochs, *batch, *seed, *threads, *device, *dir, *save, *quiet, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
}

func run(name string, epochs, batch int, seed uint64, threads int, devName, dir, save string, quiet, profile bool) error {
	mk, ok := models[name]
	if !ok {
		return fmt.Errorf("unknown model %q (have %s)", name, modelNames())
	}
	trainSet, err := data.LoadFashionMNIST(dir, true)
	if err != nil {
		return err
	}
	testSet, err := data.LoadFashionMNIST(dir, false)
	if err != nil {
		return err
	}
	dev, err := runtime.OpenDevice(devName, threads)
	if err != nil {
		return err
	}
	defer dev.Close()
	m, err := mk(dev, batch, seed)
	if err != nil {
		return err
	}
	defer m.Close()
	loader := data.NewLoader(trainSet, batch, true, seed)
	fmt.Printf("model %s on %s: %d train / %d test images, batch %d, %d steps per epoch\n",
		name, dev.Name(), trainSet.N, testSet.N, batch, loader.Len())
	for epoch := 1; epoch <= epochs; epoch++ {
		m.Train()
		if profile && epoch == epochs {
			m.Session().SetProfiling(true)
		}
		var bar *progressbar.ProgressBar
		if !quiet {
			bar = progressbar.NewOptions(loader.Len(), progressbar.OptionSetDescription(fmt.Sprintf("epoch %d", epoch)),
				progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish())
		}
		start := time.Now()
		var sum float64
		n := 0
		for {
			x, y, ok := loader.Next()
			if !ok {
				break
			}
			loss, err := m.Step(x, y)
			if err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, n+1, err)
			}
			sum += float64(loss)
			n++
			if bar != nil {
				bar.Describe(fmt.Sprintf("epoch %d loss %.4f", epoch, sum/float64(n)))
				bar.Add(1)
			}
		}
		elapsed := time.Since(start)
		loader.Reset()
		if bar != nil {
			bar.Finish()
		}
		acc, err := accuracy(m, testSet, batch)
		if err != nil {
			return err
		}
		fmt.Printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.0f samples/s (%.1f s)\n",
			epoch, sum/float64(n), 100*acc, float64(trainSet.N)/elapsed.Seconds(), elapsed.Seconds())
	}
	if profile {
		fmt.Printf("\nprofile of epoch %d (training steps and test predictions):\n", epochs)
		if err := runtime.WriteProfile(os.Stdout, m.Session().Profile()); err != nil {
			return err
		}
	}
	if save != "" {
		f, err := os.CreateTemp(".", ".ckpt-*")
		if err != nil {
			return err
		}
		if err := m.Save(f); err != nil {
			f.Close()
			os.Remove(f.Name())
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(f.Name(), save); err != nil {
			return err
		}
		fmt.Println("saved", save)
	}
	return nil
}

// accuracy evaluates in eval mode over the whole set.
func accuracy(m model, ds *data.Dataset, batch int) (float64, error) {
	m.Eval()
	loader := data.NewLoader(ds, batch, false, 0)
	correct := 0
	for {
		x, y, ok := loader.Next()
		if !ok {
			break
		}
		logits, err := m.Predict(x)
		if err != nil {
			return 0, err
		}
		classes := len(logits) / len(y)
		for r := range y {
			best := 0
			for c := 1; c < classes; c++ {
				if logits[r*classes+c] > logits[r*classes+best] {
					best = c
				}
			}
			if int32(best) == y[r] {
				correct++
			}
		}
	}
	return float64(correct) / float64(ds.N), nil
}

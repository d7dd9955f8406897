package main

import "fmt"

// checkCounts rejects flag values that parse but that the run would
// silently ignore or misread: a negative epoch count (0 is a valid way to
// only -load and -save), an accumulation below one batch, and words after
// the flags (a typo such as "-epochs 3 10" would otherwise train with
// defaults the user did not mean).
func checkCounts(epochs, accum int, args []string) error {
	switch {
	case epochs < 0:
		return fmt.Errorf("-epochs %d: want 0 or more", epochs)
	case accum < 1:
		return fmt.Errorf("-accumulate %d: want 1 (no accumulation) or more batches per update", accum)
	case len(args) > 0:
		return fmt.Errorf("unexpected argument %q: every option is a flag (train -h lists them)", args[0])
	}
	return nil
}

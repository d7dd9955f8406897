// Package exits declares a model function that exits the process.
package exits

import (
	"os"

	"github.com/ngen-ml/ngen/dsl"
)

// Quit exits before returning.
func Quit() *dsl.Model {
	os.Exit(0)
	return nil
}

package good

import "github.com/ngen-ml/ngen/dsl"

// Elsewhere is declared in another file of the package: skipped.
func Elsewhere() *dsl.Model { return Tiny() }

// Package broken does not compile.
package broken

import "github.com/ngen-ml/ngen/dsl"

// Broken has a type error on line 8.
func Broken() *dsl.Model {
	return dsl.NewModel(42)
}

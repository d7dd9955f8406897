// Package nilmodel declares a model function that returns nil.
package nilmodel

import "github.com/ngen-ml/ngen/dsl"

// Missing forgot to build its model.
func Missing() *dsl.Model { return nil }

// Package tagged holds a model file that its build constraint leaves out.
package tagged

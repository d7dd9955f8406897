module github.com/ngen-ml/ngen

go 1.26.8

require (
	github.com/dave/jennifer v1.7.1
	github.com/schollz/progressbar/v3 v3.19.1
	golang.org/x/tools v0.52.0
	gonum.org/v1/gonum v0.8.2
	gorgonia.org/cu v0.9.6
)

require (
	github.com/google/uuid v1.1.1 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/mod v0.42.0
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.44.0 // indirect
)

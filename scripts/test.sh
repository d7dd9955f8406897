#!/usr/bin/env bash
# The whole ngen test suite, as CI runs it (.ci/run calls this). Installs
# what it needs first (scripts/setup.sh is idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
# cgo's default C++ flags are "-g -O2"; the debug information is a fifth of
# g++'s time on a generated package's host code (gpt: 19.3 against 16.2 s)
# and no test reads it. The code is the same (the packages' own -O3 comes
# after these flags either way).
export CGO_CXXFLAGS="${CGO_CXXFLAGS:--O2}"
bash scripts/setup.sh

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi

echo "== go vet (default and -tags cuda)"
go vet ./...
go vet -tags cuda ./...

echo "== generated code is up to date"
go generate ./...
git diff --exit-code -- generated/ || { echo "generated/ is stale: run go generate ./... and commit"; exit 1; }
if [ -n "$(git status --porcelain -- generated/)" ]; then
  git status --porcelain -- generated/; echo "go generate produced untracked files in generated/"; exit 1
fi

echo "== build everything behind -tags cuda (no GPU here: compile only)"
# go vet -tags cuda above type-checked every package and test file behind
# the tag; this builds the packages and links the commands, and the GPU
# backend's tests below link its cgo shim. (Linking every test binary
# behind the tag as well cost minutes on a cold cache and checked nothing
# more.)
go build -tags cuda ./...
# The GPU backend's own tests: without a device each GPU test skips with
# one line; NVRTC, caching and the GPU suite's comparison harness still run.
go test -tags cuda ./runtime/cuda/...

echo "== tests"
go test -count=1 -timeout 60m ./...

echo "== race detector on the concurrency contract (a model is safe for concurrent use)"
go test -race -count=1 -run 'TestConcurrentUse' ./models/mlp

echo "== fuzzing: checkpoint reader, plan reader, IDX reader, package-name sanitiser (a few seconds each)"
# Budgets are execution counts (about 5 s each here), not durations: with a
# duration, Go 1.26's fuzz coordinator can report a spurious "context deadline
# exceeded" failure at the deadline (golang/go#75804, fixed in Go 1.27). A
# count has no deadline to race; a loaded machine only makes it slower.
go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 250000x ./runtime/safetensors
go test -run '^$' -fuzz '^FuzzDecodeCheckpoint$' -fuzztime 60000x ./runtime
go test -run '^$' -fuzz '^FuzzDecodePlan$' -fuzztime 100000x ./runtime
go test -run '^$' -fuzz '^FuzzDecodeIDX$' -fuzztime 50000x ./runtime/data
go test -run '^$' -fuzz '^FuzzPackageName$' -fuzztime 60000x ./compiler

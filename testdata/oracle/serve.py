"""Runs the oracle scripts of this directory for one Go test process.

compiler/oracle starts this once per test process (and again for each
concurrent caller) instead of one python per request: importing torch
costs about two seconds of CPU, a request milliseconds, and the suite makes
hundreds of requests.

Protocol, on stdin and stdout, repeated until stdin closes:

    request:  one JSON line {"script": "torch_mlp.py", "bytes": N}, then the
              N bytes the script would read on its standard input
    response: one JSON line {"ok": true|false, "bytes": N, "error": "..."},
              then the N bytes the script wrote on its standard output

A script is imported once (its module-level set-up runs once) and its
main() is called per request with sys.stdin and sys.stdout replaced; what
it writes to stderr, and an exception's traceback or sys.exit's message,
come back in "error". Between requests the global state a script may change
is reset: the default dtype, grad mode and the thread count (1, as every
script here sets it).
"""

import importlib.util
import io
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402  (after the path, before any script)

modules = {}


def load(name):
    if name not in modules:
        if os.path.basename(name) != name or not name.endswith(".py"):
            raise ValueError("not a script of testdata/oracle: %r" % name)
        spec = importlib.util.spec_from_file_location("oracle_" + name[:-3], os.path.join(HERE, name))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if not callable(getattr(mod, "main", None)):
            raise ValueError("%s has no main()" % name)
        modules[name] = mod
    return modules[name]


def serve():
    inp = sys.stdin.buffer
    out = sys.stdout.buffer
    real_err = sys.stderr
    torch.set_num_threads(1)
    while True:
        line = inp.readline()
        if not line:
            return 0
        head = json.loads(line)
        body = inp.read(head["bytes"])
        stdout, stderr = io.StringIO(), io.StringIO()
        ok, err = True, ""
        sys.stdin = io.TextIOWrapper(io.BytesIO(body), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        try:
            code = load(head["script"]).main()
            if code not in (None, 0):
                ok, err = False, "exit status %r" % (code,)
        except SystemExit as e:
            if e.code not in (None, 0):
                ok, err = False, str(e.code)
        except Exception:
            ok, err = False, traceback.format_exc()
        finally:
            sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, real_err
            torch.set_default_dtype(torch.float32)
            torch.set_grad_enabled(True)
            torch.set_num_threads(1)
        err = (stderr.getvalue() + err).strip()
        payload = stdout.getvalue().encode("utf-8")
        out.write((json.dumps({"ok": ok, "bytes": len(payload), "error": err}) + "\n").encode("utf-8"))
        out.write(payload)
        out.flush()


if __name__ == "__main__":
    sys.exit(serve())

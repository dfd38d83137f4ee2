# SPDX-License-Identifier: MIT
"""A C++ program (tp_cxx: iostreams, std::string, containers, exceptions,
std::thread, shared_ptr): the same stdout and exit status (3) with and
without the shim, a consistent report without memory errors (a new/delete
form the shim got wrong would show as a mismatched free), and at least the
80000 allocations the program certainly makes."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402


def case_cxx(ctx):
    path = ctx.prog("tp_cxx")
    plain = ctx.run_plain([path])
    T.check_eq(plain.returncode, 3, "tp_cxx without the shim: status")
    for via in ("tool", "preload"):
        r, rep = ctx.run_and_report([path], via=via, what="tp_cxx", expect_status=3)
        T.same_output(plain, r, "tp_cxx")
        proc = T.only_process(rep, "tp_cxx")
        T.check_exited(proc, 3)
        T.check_consistent(proc, allocator=ctx.allocator)
        T.check_ge(T.device(proc)["num_allocs"], 80000, "tp_cxx: num_allocs")


CASES = {"cxx": case_cxx}

if __name__ == "__main__":
    T.main(CASES)

# SPDX-License-Identifier: MIT
"""The real-program matrix: unmodified Debian programs under the shim.

One table (MATRIX): each case is a list of steps (argv, stdin, environment)
run in a directory of its own, once plain and once under `tfalloc run`, in
two twin directories holding the same inputs (written by the case, seeded,
so both runs see the same bytes).  Every step must give byte-identical stdout
and the same exit status both ways, write a profile that `tfalloc report
--format json` reads, with the step's own process (the child of `tfalloc
run`) ended by exit with that status, its numbers consistent
(tfa_test.check_consistent), and every other process of the step (children:
cc1, as, ld, git's helpers, the shells of make...) with a complete profile.
A case may also compare the files the runs wrote (`same_files`).

Outputs that would differ between runs are made deterministic by the
commands themselves: fixed dates for git and tar, `--sort=name` and
`--mtime` for tar, `gzip -n`, relative paths, sorted listings.

The server case (redis) is different: redis-server under the shim on a free
loopback port, redis-benchmark (plain, a bounded number of requests) against
it, then redis-server asked to shut down; the benchmark's exit status is
compared with the same benchmark against a plain server, and the server's
profile must be written and read.  Its stdout (timings) is not compared.
"""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfa_test as T  # noqa: E402

FIXED_DATE = "2020-01-02T03:04:05+00:00"
FIXED_EPOCH = 1577934245


# ---- inputs -------------------------------------------------------------------

def words(rnd, n, alphabet="abcdefghijklmnop", lo=3, hi=12):
    return ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(lo, hi))) for _ in range(n)]


def write(d, name, text):
    path = os.path.join(d, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w" if isinstance(text, str) else "wb") as f:
        f.write(text)
    os.utime(path, (FIXED_EPOCH, FIXED_EPOCH))
    return path


def text_lines(seed, n):
    rnd = random.Random(seed)
    return "".join("%s %d %s %s\n" % (" ".join(words(rnd, rnd.randint(1, 4))), rnd.randint(0, 10 ** 6),
                                      rnd.choice(["INFO", "WARN", "ERROR", "DEBUG"]), "x" * (i % 9))
                   for i in range(n))


def tree(d, seed=3, dirs=6, files=12):
    """A small directory tree of text files with fixed modification times."""
    rnd = random.Random(seed)
    for i in range(dirs):
        for j in range(files):
            write(d, "tree/d%02d/sub%d/f%02d.%s" % (i, j % 3, j, rnd.choice(["txt", "log", "c"])),
                  text_lines(seed * 1000 + i * 100 + j, rnd.randint(1, 120)))
    for root, dnames, _ in os.walk(os.path.join(d, "tree"), topdown=False):
        for n in dnames:
            os.utime(os.path.join(root, n), (FIXED_EPOCH, FIXED_EPOCH))
    os.utime(os.path.join(d, "tree"), (FIXED_EPOCH, FIXED_EPOCH))


C_SOURCE = r'''
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node { char *key; int count; struct node *left, *right; };

static struct node *insert(struct node *n, const char *key)
{
	if (!n) {
		n = calloc(1, sizeof *n);
		n->key = strdup(key);
		n->count = 1;
		return n;
	}
	int c = strcmp(key, n->key);
	if (c < 0)
		n->left = insert(n->left, key);
	else if (c > 0)
		n->right = insert(n->right, key);
	else
		n->count++;
	return n;
}

static void walk(const struct node *n, unsigned long *sum, int *distinct)
{
	if (!n)
		return;
	walk(n->left, sum, distinct);
	*sum = *sum * 31 + (unsigned long)n->count + strlen(n->key);
	(*distinct)++;
	walk(n->right, sum, distinct);
}

static void drop(struct node *n)
{
	if (!n)
		return;
	drop(n->left);
	drop(n->right);
	free(n->key);
	free(n);
}

int main(void)
{
	struct node *root = NULL;
	unsigned long seed = 12345, sum = 0;
	int distinct = 0;
	for (int i = 0; i < 20000; i++) {
		char buf[16];
		seed = seed * 6364136223846793005UL + 1442695040888963407UL;
		snprintf(buf, sizeof buf, "k%lu", (seed >> 33) % 5000);
		root = insert(root, buf);
	}
	walk(root, &sum, &distinct);
	printf("%d %lu\n", distinct, sum);
	drop(root);
	return 0;
}
'''

CXX_SOURCE = r'''
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

struct Shape {
	virtual ~Shape() = default;
	virtual double area() const = 0;
	virtual std::string name() const = 0;
};
struct Rect : Shape {
	double w, h;
	Rect(double w_, double h_) : w(w_), h(h_) { if (w < 0 || h < 0) throw std::invalid_argument("negative side"); }
	double area() const override { return w * h; }
	std::string name() const override { return "rect"; }
};
struct Tri : Shape {
	double b, h;
	Tri(double b_, double h_) : b(b_), h(h_) {}
	double area() const override { return b * h / 2; }
	std::string name() const override { return "tri"; }
};

static int parse(const std::string &s)
{
	std::size_t pos = 0;
	int v = std::stoi(s, &pos);
	if (pos != s.size())
		throw std::runtime_error("trailing garbage in '" + s + "'");
	return v;
}

int main()
{
	std::vector<std::unique_ptr<Shape>> shapes;
	std::map<std::string, double> totals;
	int errors = 0;
	for (int i = -50; i < 2000; i++) {
		try {
			if (i % 2)
				shapes.emplace_back(new Rect(i % 7 == 0 ? -1 : i, i % 13));
			else
				shapes.emplace_back(new Tri(i, i % 11));
		} catch (const std::invalid_argument &e) {
			errors++;
		}
	}
	for (const auto &s : shapes)
		totals[s->name()] += s->area();
	std::ostringstream out;
	for (const auto &t : totals)
		out << t.first << ' ' << t.second << '\n';
	std::cout << out.str() << "shapes " << shapes.size() << " errors " << errors << '\n';
	const char *inputs[] = {"12", "7x", "", "99999999999999999999", "-3"};
	for (const char *in : inputs) {
		try {
			std::cout << "parse " << parse(in) << '\n';
		} catch (const std::exception &e) {
			std::cout << "error " << e.what() << '\n';
		}
	}
	return errors == 0 ? 1 : 0;
}
'''

BASH_SCRIPT = r'''
set -u
# The subshells first: each forked child's profile holds what bash had
# allocated by then (bash frees little), which keeps the reports small.
fib() { local n=$1; if (( n < 2 )); then echo $n; else echo $(( $(fib $((n-1))) + $(fib $((n-2))) )); fi; }
echo "fib $(fib 4)"
x=$(grep -c ERROR input.txt | tr -d ' '); echo "errors $x"
( cd tree && printf '%s\n' */sub0/*.txt | sort | head -5 )
declare -A seen
count=0
while read -r w n level rest; do
	seen[$level]=$(( ${seen[$level]:-0} + 1 ))
	count=$((count + 1))
	[[ $w == a* ]] && echo "a-word ${w^^} $n"
done < input.txt
for k in INFO WARN ERROR DEBUG; do echo "$k ${seen[$k]}"; done
echo "lines $count"
arr=( $(seq 1 200) )
echo "sum $(IFS=+; echo $(( ${arr[*]} )))"
s=""; for i in {1..300}; do s+="$i,"; done; echo "${#s} ${s:0:20}"
case "$count" in *0) echo ends-with-zero;; *) echo other;; esac
exit 3
'''

PERL_SCRIPT = r'''
use strict; use warnings;
my (%count, %sum, @rows);
open(my $fh, '<', 'input.txt') or die;
while (my $line = <$fh>) {
    chomp $line;
    my @f = split / /, $line;
    next unless @f >= 3;
    my ($num) = grep { /^\d+$/ } @f;
    next unless defined $num;
    my ($level) = grep { /^(INFO|WARN|ERROR|DEBUG)$/ } @f;
    $count{$level}++;
    $sum{$level} += $num;
    push @rows, [$f[0], $num];
}
close $fh;
printf "%s %d %d\n", $_, $count{$_}, $sum{$_} for sort keys %count;
my @top = (sort { $b->[1] <=> $a->[1] or $a->[0] cmp $b->[0] } @rows)[0..4];
print join(",", map { "$_->[0]=$_->[1]" } @top), "\n";
my $text = join " ", map { $_->[0] } @rows;
my %freq; $freq{$_}++ for ($text =~ /([aeiou]{2,})/g);
print join(" ", map { "$_:$freq{$_}" } (sort { $freq{$b} <=> $freq{$a} or $a cmp $b } keys %freq)[0..9]), "\n";
(my $t = $text) =~ s/(\w+)/\u$1/g;
print length($t), " ", substr($t, 0, 40), "\n";
my @big = map { { id => $_, s => "v" x ($_ % 50) } } 1..20000;
my $total = 0; $total += length($_->{s}) for @big;
print "total $total\n";
'''

PERL_XS = r'''
use strict; use warnings;
use POSIX qw(floor ceil strftime);
use List::Util qw(sum max shuffle reduce);
use Scalar::Util qw(blessed reftype);
use Storable qw(freeze thaw dclone);
use Data::Dumper; $Data::Dumper::Sortkeys = 1; $Data::Dumper::Indent = 1;
use Digest::MD5 qw(md5_hex);
use Digest::SHA qw(sha256_hex);
use MIME::Base64;
use Encode qw(encode decode);
use Time::HiRes ();
use File::Spec; use Cwd ();
my $d = { list => [1 .. 50], name => "matrix", nested => { a => [map { { k => $_ } } 1 .. 20] } };
my $copy = thaw(freeze($d));
my $clone = dclone($copy);
print Dumper($clone->{nested}{a}[3]);
print sum(@{ $clone->{list} }), " ", max(@{ $clone->{list} }), " ", reduce { $a * $b } 1 .. 10;
print "\n", floor(7.7), ceil(7.2), " ", strftime("%Y-%m-%d", gmtime(86400 * 365)), "\n";
print md5_hex("abc" x 1000), " ", sha256_hex(encode("UTF-8", "\x{263A}" x 100)), "\n";
print encode_base64(join "", map { chr($_ % 256) } 0 .. 300);
print reftype($d), " ", (blessed(bless {}, "Foo")), " ", File::Spec->catfile("a", "b"), "\n";
'''

PY_THREADS = r'''
import concurrent.futures, hashlib, json, threading
lock = threading.Lock()
shared = {}
def work(k):
    d = {}
    for i in range(20000):
        d["k%d-%d" % (k, i)] = [i, str(i) * (i % 5), {"x": i}]
    s = json.dumps(sorted(d)[:2000])
    with lock:
        shared[k] = len(d)
    return k, hashlib.sha256(s.encode()).hexdigest()
with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
    for k, h in ex.map(work, range(8)):
        print(k, h)
print(sorted(shared.items()))
'''

PY_MP = r'''
import hashlib, multiprocessing
def work(k):
    data = [str(i * k).encode() for i in range(20000)]
    return k, hashlib.md5(b"".join(data)).hexdigest(), len(data)
if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    pool = multiprocessing.Pool(2)
    for r in pool.map(work, range(6)):
        print(*r)
    pool.close()
    pool.join()
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=lambda i=i: q.put(sum(range(i * 10000)))) for i in range(3)]
    for p in ps:
        p.start()
    got = sorted(q.get() for _ in ps)
    for p in ps:
        p.join()
    print(got, [p.exitcode for p in ps])
'''

# dlopen and dlclose in a loop: python3's own _ctypes.dlopen/dlclose, on
# shared libraries python3 does not link (each dlclose really unmaps them),
# calling a function of each library between.
PY_DLOPEN = r'''
import _ctypes, ctypes
libs = [("libsqlite3.so.0", "sqlite3_libversion_number"), ("libbz2.so.1", "BZ2_bzlibVersion"),
        ("libzstd.so.1", "ZSTD_versionNumber"), ("libjq.so.1", "jq_init"),
        ("libmagic.so.1", "magic_version"), ("libgmp.so.10", "__gmpz_init")]
seen = {}
for i in range(100):
    for name, sym in libs:
        h = _ctypes.dlopen(name, ctypes.RTLD_LOCAL)
        lib = ctypes.CDLL(name, handle=h)
        f = getattr(lib, sym)
        if sym == "sqlite3_libversion_number" or sym == "ZSTD_versionNumber" or sym == "magic_version":
            f.restype = ctypes.c_int
            seen[name] = f() > 0
        else:
            seen[name] = bool(ctypes.cast(f, ctypes.c_void_p).value)
        del f, lib
        _ctypes.dlclose(h)
print(sorted(seen.items()))
'''

SQL = r'''
CREATE TABLE t(id INTEGER PRIMARY KEY, w TEXT, g INTEGER, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000)
INSERT INTO t(w, g, v) SELECT printf('w%05d', (x * 7919) % 3001), x % 17, (x * 31 % 1000) / 10.0 FROM c;
CREATE INDEX t_g ON t(g);
SELECT g, count(*), round(sum(v), 1), min(w), max(w) FROM t GROUP BY g ORDER BY g;
SELECT id, w, rank() OVER (PARTITION BY g ORDER BY v DESC, id) AS r FROM t WHERE id < 40 ORDER BY id;
SELECT g, group_concat(w, ';') FROM (SELECT g, w FROM t WHERE v > 99 ORDER BY w) GROUP BY g ORDER BY g;
SELECT json_group_array(json_object('id', id, 'w', w)) FROM (SELECT * FROM t ORDER BY id LIMIT 5);
PRAGMA integrity_check;
'''

MAKEFILE = r'''
WORDS := $(sort $(shell cat words.txt))
PARTS := $(addprefix out/,$(addsuffix .part,a b c d e f))
all: out/result
	@cat out/result
	@echo "words $(words $(WORDS)) first $(firstword $(WORDS))"
out/%.part: input.txt | out
	@grep '^$*' input.txt | sort | md5sum > $@
out/result: $(PARTS)
	@cat $^ > $@
out:
	@mkdir -p out
.PHONY: all
'''

GAWK_SCRIPT = r'''
{ n[$NF == "" ? "none" : length($NF)]++; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) s[$0 ~ /ERROR/] += $i
  w[$1] = w[$1] " " NR }
END {
  PROCINFO["sorted_in"] = "@ind_str_asc"
  for (k in n) printf "%s %d\n", k, n[k]
  printf "sums %d %d\n", s[0], s[1]
  c = 0; for (k in w) if (split(w[k], a, " ") > 2) { c++; if (c <= 5) print k, a[1], a[2] }
  print c, toupper(substr("matrix", 2, 3)), sprintf("%08.3f", 3.14159), gensub(/(a+)/, "<\\1>", "g", "banana")
}
'''

M4_INPUT = r'''define(`fact', `ifelse(`$1', `0', `1', `eval($1 * fact(decr($1)))')')dnl
define(`loop', `ifelse(eval($1 <= $2), 1, `$1:fact($1) loop(incr($1), $2)')')dnl
loop(1, 12)
define(`rep', `ifelse(`$1', `0', `', `$2`'rep(decr($1), `$2')')')dnl
len(rep(200, `ab'))
translit(`hello matrix', `a-z', `A-Z')
patsubst(`one two three', `\w+', `<\&>')
'''

JQ_FILTER = '[.[] | select(.v > 50) | {id, w: (.w | ascii_upcase), s: (.tags | join("-"))}] | ' \
            'group_by(.s | length) | map({n: length, first: .[0].id})'


def json_input():
    rnd = random.Random(11)
    import json
    return json.dumps([{"id": i, "w": w, "v": rnd.randint(0, 100), "tags": words(rnd, rnd.randint(0, 4), lo=1, hi=4)}
                       for i, w in enumerate(words(rnd, 3000))])


def git_env():
    return {"GIT_AUTHOR_NAME": "Matrix", "GIT_AUTHOR_EMAIL": "m@example.org", "GIT_AUTHOR_DATE": FIXED_DATE,
            "GIT_COMMITTER_NAME": "Matrix", "GIT_COMMITTER_EMAIL": "m@example.org",
            "GIT_COMMITTER_DATE": FIXED_DATE, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0"}


def git_steps():
    g = ["/usr/bin/git", "-c", "init.defaultBranch=main", "-c", "gc.auto=0"]
    steps = [g + ["init", "-q", "repo"]]
    for k in range(4):
        steps.append(g + ["-C", "repo", "add", "-A", "."] if k == 0 else
                     ["/bin/sh", "-c", "cp -r tree/d0%d repo/d0%d && git -C repo add -A ." % (k, k)])
        steps.append(g + ["-C", "repo", "commit", "-q", "-m", "commit %d" % k])
    steps += [
        g + ["-C", "repo", "log", "--stat", "--format=%H %an %ad %s", "--date=iso-strict"],
        g + ["-C", "repo", "gc", "--quiet", "--aggressive"],
        g + ["clone", "-q", "--no-local", "repo", "clone"],
        g + ["-C", "clone", "log", "--format=%H %s", "--name-status"],
        g + ["-C", "clone", "fsck", "--full", "--strict"],
        g + ["-C", "repo", "count-objects", "-v"],
    ]
    return steps


def setup_git(d):
    tree(d)
    shutil.copytree(os.path.join(d, "tree", "d00"), os.path.join(d, "repo", "d00"))


def setup_patch(d):
    text = text_lines(13, 3000)
    write(d, "a.txt", text)
    b = write(d, "b.tmp", text.replace("INFO", "info"))
    diff = subprocess.run(["/usr/bin/diff", "-u", "--label", "a.txt", "--label", "a.txt", "-", b],
                          input=text.encode(), stdout=subprocess.PIPE).stdout
    write(d, "fix.diff", diff)


CMAKE_SCRIPT = r'''
file(READ "prog.cpp" t)
string(JSON v ERROR_VARIABLE e GET "{\"a\": [1" a)
message("json error: ${e}")
string(JSON n LENGTH "{\"a\": [1, 2, {\"b\": null}]}" a)
message("json length: ${n}")
string(SHA1 h "${t}")
string(REGEX MATCHALL "std::[a-z_]+" m "${t}")
list(REMOVE_DUPLICATES m)
list(SORT m)
message("${h} ${m}")
file(WRITE "copy.cpp" "${t}")
file(SIZE "copy.cpp" sz)
message("size ${sz}")
'''


# The table: name -> dict(setup, steps or argv, stdin, env, files, ...).
#   setup(d)    writes the inputs into the case's directory d
#   steps       list of argv (or (argv, stdin)), run in order in d
#   env         extra environment of every step
#   files       paths (relative to d) whose bytes must be the same after both runs
#   threads     the program runs threads (check_consistent's slack)
MATRIX = {
    "sort_parallel": dict(setup=lambda d: write(d, "input.txt", text_lines(1, 60000)),
                          steps=[["/usr/bin/sort", "--parallel=2", "-S", "32M", "-T", ".", "-k2,2n", "-k1,1",
                                  "input.txt"]], threads=True),
    "ls": dict(shared=tree, steps=[["/bin/ls", "-lnRa", "--time-style=+%F %T", "tree/"]]),
    "du": dict(shared=tree, steps=[["/usr/bin/du", "-ab", "tree/"]]),
    "cp": dict(shared=tree, steps=[["/bin/cp", "-a", "tree/", "copy"], ["/bin/cp", "-rv", "tree/d01", "copy2"]],
               files=["copy", "copy2"]),
    "find": dict(shared=tree, steps=[["/usr/bin/find", "tree/", "-type", "f", "-name", "*.txt", "-size", "+1k",
                                      "-printf", "%p %s %TY\n"]]),
    "sha256sum": dict(shared=tree, steps=[["/bin/sh", "-c", "exec sha256sum tree/*/sub1/*"]]),
    "grep": dict(shared=tree, setup=lambda d: write(d, "input.txt", text_lines(2, 40000)),
                 steps=[["/bin/grep", "-E", "-n", "-i", "^[a-f]+ .*(ERROR|WARN)", "input.txt"],
                        ["/bin/grep", "-rc", "--include=*.log", "ERROR", "tree/"],
                        ["/bin/grep", "-P", "-o", "\\b(\\w)\\w*\\1\\b", "input.txt"],
                        ["/bin/grep", "-q", "no-such-word", "input.txt"]]),
    "sed": dict(setup=lambda d: write(d, "input.txt", text_lines(3, 30000)),
                steps=[["/bin/sed", "-E", "-e", "s/([a-h]+) ([0-9]+)/\\2:\\1/g", "-e", "/DEBUG/d",
                        "-e", "y/abc/ABC/", "-e", "10~7s/x+$/[&]/", "input.txt"]]),
    "gawk": dict(setup=lambda d: write(d, "input.txt", text_lines(4, 30000)),
                 steps=[["/usr/bin/gawk", GAWK_SCRIPT, "input.txt"]]),
    "bash": dict(setup=lambda d: (tree(d), write(d, "input.txt", text_lines(5, 2000)),
                                  write(d, "script.sh", BASH_SCRIPT)),
                 steps=[["/bin/bash", "script.sh"]]),
    "perl": dict(setup=lambda d: (write(d, "input.txt", text_lines(6, 30000)), write(d, "s.pl", PERL_SCRIPT)),
                 steps=[["/usr/bin/perl", "s.pl"]]),
    "perl_xs": dict(setup=lambda d: write(d, "s.pl", PERL_XS), steps=[["/usr/bin/perl", "s.pl"]]),
    "python3_threads": dict(steps=[["/usr/bin/python3", "-s", "-c", PY_THREADS]], threads=True,
                            threads_at_exit=True, env={"PYTHONHASHSEED": "0", "PYTHONMALLOC": "malloc"}),
    "python3_multiprocessing": dict(steps=[["/usr/bin/python3", "-s", "-c", PY_MP]], threads=True,
                                    threads_at_exit=True,
                                    env={"PYTHONHASHSEED": "0"}),
    "python3_dlopen": dict(steps=[["/usr/bin/python3", "-s", "-c", PY_DLOPEN]], env={"PYTHONHASHSEED": "0"}),
    "sqlite3": dict(steps=[(["/usr/bin/sqlite3", "-batch", "-bail", "db.sqlite"], SQL)]),
    "git": dict(setup=setup_git, steps=git_steps(), env=git_env(), files=["repo/.git/packed-refs"]),
    "gcc": dict(setup=lambda d: write(d, "prog.c", C_SOURCE),
                steps=[["/usr/bin/gcc", "-O2", "-Wall", "-Werror", "-c", "prog.c", "-o", "prog.o"],
                       ["/usr/bin/gcc", "prog.o", "-o", "prog"], ["./prog"]], files=["prog.o"]),
    "gxx": dict(setup=lambda d: write(d, "prog.cpp", CXX_SOURCE),
                steps=[["/usr/bin/g++", "-O0", "-std=c++17", "-Wall", "-Werror", "prog.cpp", "-o", "prog"],
                       ["./prog"]]),
    "make": dict(setup=lambda d: (write(d, "input.txt", text_lines(7, 5000)),
                                  write(d, "words.txt", " ".join(words(random.Random(8), 300))),
                                  write(d, "Makefile", MAKEFILE)),
                 steps=[["/usr/bin/make", "-j2", "--no-print-directory"], ["/usr/bin/make", "-q", "out/result"]]),
    "tar_xz": dict(setup=lambda d: (tree(d, dirs=10, files=15), write(d, "big.txt", text_lines(9, 40000))),
                   steps=[["/bin/tar", "--sort=name", "--mtime=@%d" % FIXED_EPOCH, "--owner=0", "--group=0",
                           "--numeric-owner", "-cJf", "-", "tree", "big.txt"]],
                   env={"XZ_OPT": "-T2 -1 --block-size=262144"}),
    "tar_zstd": dict(setup=lambda d: (tree(d, dirs=10, files=15), write(d, "big.txt", text_lines(10, 40000))),
                     steps=[["/bin/tar", "--sort=name", "--mtime=@%d" % FIXED_EPOCH, "--owner=0", "--group=0",
                             "--numeric-owner", "-I", "zstd -T2 -3 --no-progress", "-cf", "a.tar.zst",
                             "tree", "big.txt"],
                            ["/bin/tar", "-I", "zstd -d -T2", "-tvf", "a.tar.zst"]],
                     files=["a.tar.zst"]),
    "diff": dict(setup=lambda d: (write(d, "a.txt", text_lines(12, 3000)),
                                  write(d, "b.txt", text_lines(12, 3000).replace("WARN", "WARNING"))),
                 steps=[["/usr/bin/diff", "-u", "--label", "a", "--label", "b", "a.txt", "b.txt"]]),
    "patch": dict(setup=setup_patch, steps=[["/usr/bin/patch", "-p0", "-i", "fix.diff"],
                                            ["/usr/bin/sha256sum", "a.txt"]], files=["a.txt"]),
    "gzip": dict(setup=lambda d: write(d, "input.txt", text_lines(14, 40000)),
                 steps=[["/bin/gzip", "-9", "-n", "-c", "input.txt"]], allocs=False),
    "bzip2": dict(setup=lambda d: write(d, "input.txt", text_lines(15, 20000)),
                  steps=[["/bin/bzip2", "-9", "-c", "input.txt"]]),
    "bc": dict(steps=[(["/usr/bin/bc", "-l"], "scale=400\n4*a(1)\ne(1)\nsqrt(2)\n2^1000\n")]),
    "jq": dict(setup=lambda d: write(d, "in.json", json_input()),
               steps=[["/usr/bin/jq", "-c", JQ_FILTER, "in.json"], ["/usr/bin/jq", "-e", ".[0].missing", "in.json"]]),
    "m4": dict(steps=[(["/usr/bin/m4"], M4_INPUT)]),
    "openssl": dict(setup=lambda d: write(d, "input.txt", text_lines(16, 20000)),
                    steps=[["/usr/bin/openssl", "dgst", "-sha512", "input.txt"],
                           ["/usr/bin/openssl", "enc", "-aes-256-cbc", "-K", "00" * 32, "-iv", "11" * 16,
                            "-in", "input.txt"],
                           ["/usr/bin/openssl", "base64", "-in", "input.txt"]]),
    "file": dict(setup=lambda d: (write(d, "prog.c", C_SOURCE), write(d, "in.json", json_input())),
                 steps=[["/usr/bin/file", "-b", "prog.c", "in.json", "/usr/bin/perl", "/bin/sh"]]),
    "cmake_cxx": dict(setup=lambda d: (write(d, "s.cmake", CMAKE_SCRIPT), write(d, "prog.cpp", CXX_SOURCE)),
                      steps=[["/usr/bin/cmake", "-P", "s.cmake"], ["/usr/bin/cmake", "-E", "sha256sum", "prog.cpp"]]),
    "links_jemalloc": dict(prog="tp_links_jemalloc"),
}


def profile_of(ctx, r, rep, what, expect_status, threads, threads_at_exit, allocs=True):
    """The profile of the program tfalloc run started (after any exec: the
    image that exited), checked; every other profile must be complete."""
    procs = rep["processes"]
    root = [p for p in procs if p.get("ppid") == r.pid and p.get("end_reason") != "exec"]
    T.check(len(root) == 1, "%s: expected one profile of the program (child of tfalloc run %d), got:\n%s"
            % (what, r.pid, T.summary(procs)))
    proc = root[0]
    T.check_exited(proc, expect_status)
    T.check_consistent(proc, multithreaded=threads, allocator=ctx.allocator, threads_at_exit=threads_at_exit,
                       require_allocs=allocs)
    for p in procs:
        if p is not proc:
            T.check(p.get("complete") is True, "%s: incomplete profile:\n%s" % (what, T.summary([p])))
            if p.get("end_reason") == "exit":
                T.check_consistent(p, require_allocs=False, allocator=ctx.allocator,
                                   multithreaded=threads, threads_at_exit=threads_at_exit)
    return proc


def run_table_case(ctx, name):
    spec = MATRIX[name]
    steps = spec.get("steps") or [[ctx.prog(spec["prog"])]]
    d_plain, d_shim = ctx.mkdtemp("plain"), ctx.mkdtemp("shim")
    if spec.get("shared"):
        # Inputs only read: one copy both runs read (through a symlink), so
        # that listings in directory order (cp -r sorts by inode) are the same.
        shared = os.path.join(ctx.scratch, "shared")
        os.makedirs(shared)
        spec["shared"](shared)
    for d in (d_plain, d_shim):
        if spec.get("shared"):
            for n in os.listdir(shared):
                os.symlink(os.path.join(shared, n), os.path.join(d, n))
        if spec.get("setup"):
            spec["setup"](d)
    env = spec.get("env")
    for i, step in enumerate(steps):
        argv, stdin = step if isinstance(step, tuple) else (step, None)
        what = "%s step %d (%s)" % (name, i + 1, " ".join(argv)[:200])
        plain = ctx.run_plain(argv, env=env, stdin=stdin, cwd=d_plain)
        T.check(not isinstance(plain.returncode, int) or plain.returncode >= 0,
                "%s: killed by a signal without the shim\n%s" % (what, plain.describe()))
        r, rep = ctx.run_and_report(argv, env=env, stdin=stdin, cwd=d_shim, what=what,
                                    expect_status=plain.returncode)
        T.same_output(plain, r, what)
        profile_of(ctx, r, rep, what, plain.returncode, spec.get("threads", False),
                   spec.get("threads_at_exit", False), spec.get("allocs", True))
    for f in spec.get("files", []):
        T.check(tree_bytes(d_plain, f) == tree_bytes(d_shim, f),
                "%s: %s differs between the plain run and the run under the shim" % (name, f))


def tree_bytes(d, rel):
    """The contents of file rel of d, or of every file under directory rel, by relative path."""
    top = os.path.join(d, rel)
    T.check(os.path.exists(top), "%s was not written" % top)
    if not os.path.isdir(top):
        with open(top, "rb") as f:
            return f.read()
    out = {}
    for root, _, names in os.walk(top):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, top)] = f.read()
    return out


# ---- the server: redis-server under load --------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ping(ctx, port, server, deadline):
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        p = subprocess.run(["/usr/bin/redis-cli", "-p", str(port), "ping"], env=ctx.env(),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10)
        if p.stdout.strip() == b"PONG":
            return True
        time.sleep(0.05)
    return False


def redis_round(ctx, shim):
    port = free_port()
    d = ctx.mkdtemp("redis")
    argv = ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", d, "--daemonize", "no", "--logfile", "", "--loglevel", "warning"]
    outdir = None
    if shim:
        outdir = ctx.mkdtemp("out")
        argv = [ctx.tool, "run", "--output", outdir, "--allocator", ctx.allocator, "--quiet", "--"] + argv
    log = open(os.path.join(d, "server.log"), "wb")
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=ctx.env(), cwd=d, start_new_session=True)
    try:
        T.check(wait_ping(ctx, port, server, time.monotonic() + 20),
                "redis-server (%s) did not answer PING on port %d; log:\n%s"
                % ("under the shim" if shim else "plain", port, open(os.path.join(d, "server.log")).read()[-2000:]))
        bench = ctx.run_plain(["/usr/bin/redis-benchmark", "-p", str(port), "-n", "20000", "-c", "8", "-P", "4",
                               "-r", "1000", "-d", "200", "-q", "-t", "set,get,incr,lpush,lpop,sadd,hset,mset"],
                              timeout=60)
        info = ctx.run_plain(["/usr/bin/redis-cli", "-p", str(port), "dbsize"], timeout=10)
        shut = ctx.run_plain(["/usr/bin/redis-cli", "-p", str(port), "shutdown", "nosave"], timeout=10)
        status = server.wait(timeout=30)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
    return bench, info, shut, status, server.pid, outdir


def case_redis(ctx):
    pb, pi, _, pstatus, _, _ = redis_round(ctx, shim=False)
    T.check(pb.returncode == 0, "redis-benchmark fails without the shim\n" + pb.describe())
    sb, si, _, sstatus, spid, outdir = redis_round(ctx, shim=True)
    T.check_eq(sb.returncode, pb.returncode, "redis-benchmark's exit status against the server under the shim")
    T.check(sb.out.count("requests per second") == pb.out.count("requests per second"),
            "redis-benchmark ran %d tests against the plain server, %d against the server under the shim\n%s"
            % (pb.out.count("requests per second"), sb.out.count("requests per second"), sb.describe()))
    T.check_eq(si.out, pi.out, "redis-cli dbsize after the benchmark")
    T.check_eq(sstatus, pstatus, "redis-server's exit status after SHUTDOWN")
    T.check(os.listdir(outdir), "redis-server under the shim wrote no profile into " + outdir)
    rep = ctx.report(outdir, "redis-server")
    r = T.Result(["redis-server"], sstatus, b"", b"", spid, outdir, "tfalloc")
    proc = profile_of(ctx, r, rep, "redis-server", pstatus, True, True)
    T.check_ge(T.device(proc)["num_allocs"], 20000, "redis-server under load: num_allocs")


CASES = {name: (lambda ctx, name=name: run_table_case(ctx, name)) for name in MATRIX}
CASES["redis"] = case_redis

if __name__ == "__main__":
    T.main(CASES)

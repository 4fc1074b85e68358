#!/usr/bin/env python3
"""Check that the operator manuals cite code and tests that exist.

Usage: check-manuals.py SOURCE_ROOT [BUILD_DIR] [--manuals DIR] [--expect FILE]
                        [--verbose]

What is checked, in every docs/operator/*.md (or the manuals in --manuals):

  file:function   `path/file.c:func` anywhere in a manual (table cells
                  included), with further functions after commas
                  (`pp-mesh.c:spawn_workers, pp_mesh_stop`).  The file must
                  exist (a bare or partial path is resolved against the
                  source tree when it is unique) and each function must be
                  defined in it.
  file            a relative path with a directory and a known extension
                  (docs/perf.md, pipelines/webcam-obs.sh) whose first
                  directory exists in the source tree: the file must exist.
  meson test      in a "Break-it tests" section, the backticked names that
                  open a bullet; anywhere, a backticked name that starts like
                  a family of meson tests (`fault-...`, `unit-...`).  The
                  test or benchmark must be defined (meson introspection of
                  BUILD_DIR and tests/**/meson.build, followed from
                  tests/meson.build).  "(suite `x`)" names a suite, which
                  must exist and hold the test before it; "(benchmark)" after
                  a name says it is a benchmark.
  GLib test path  a backticked /path in a "Break-it tests" section, or one
                  under a known GLib root anywhere: some g_test_add* call
                  under tests/ must register it.  `*` matches within a path
                  component, {a,b} expands to several paths, a path that is a
                  prefix of registered ones (as `-p` takes it) is accepted,
                  and `/x/*` (a, b) checks /x/a and /x/b.
  C test          a backticked test_* identifier: it must be defined in a
                  file under tests/ and added to a test case or suite.

A GLib path or C test in a bullet that opens with meson test names must be
registered in the sources of one of those tests when it is found in the
sources of another test only.

Prints one line per broken reference (MANUAL:LINE: what is missing) and a
count of the references checked; exits 1 if any is broken.  With --expect
FILE, exits 0 only when the broken references are exactly those in FILE
(lines "MANUAL-BASENAME:LINE: REFERENCE") and as many references are checked
as its line "checked: N" says; used to test this checker.

References in a sentence that starts "Not yet" are skipped: they may name what
does not exist yet.  Fenced code blocks are skipped.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# Test fixtures of this checker: a small source tree of their own, never
# part of the project's tree.
EXCLUDED_DIRS = {os.path.join('tests', 'docs', 'fixtures')}

C_EXTS = ('c', 'h', 'cc', 'cpp', 'cxx', 'cu', 'cuh', 'hh', 'hpp', 'm')
FILE_EXTS = C_EXTS + ('md', 'sh', 'py', 'build', 'txt', 'json', 'toml', 'yml',
                      'yaml', 'in', 'ini', 'cfg')
IDENT = r'[A-Za-z_][A-Za-z0-9_]*'
# Filesystem locations that are not GLib test paths.
FS_ROOTS = {'tmp', 'dev', 'proc', 'sys', 'usr', 'etc', 'var', 'home', 'opt',
            'run', 'bin', 'lib', 'srv', 'mnt', 'root'}


class Ref:
    def __init__(self, manual, line, kind, text, off=0):
        self.manual = manual
        self.line = line
        self.off = off          # offset in its block
        self.kind = kind
        self.text = text
        self.problem = None

    def __repr__(self):
        return '%s:%d: %s %s' % (self.manual, self.line, self.kind, self.text)


# ---------------------------------------------------------------------------
# Source tree

def is_build_dir(path):
    return (os.path.isdir(os.path.join(path, 'meson-private'))
            or os.path.isdir(os.path.join(path, 'meson-info')))


def walk_tree(root, skip):
    """All files under root, relative, without .git, build dirs and skip."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        keep = []
        for d in sorted(dirnames):
            rel = os.path.normpath(os.path.join(rel_dir, d))
            full = os.path.join(dirpath, d)
            if d.startswith('.') or rel in EXCLUDED_DIRS:
                continue
            if os.path.realpath(full) in skip or is_build_dir(full):
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in filenames:
            out.append(os.path.normpath(os.path.join(rel_dir, f)))
    return sorted(out)


def read_text(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()


def strip_c_comments(text):
    """Comments replaced by spaces (newlines kept); strings left alone."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '/' and i + 1 < n and text[i + 1] == '*':
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c == '/' and i + 1 < n and text[i + 1] == '/':
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


ATTRIBUTE_RE = re.compile(r'__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)')


def skip_balanced(text, i):
    """text[i] is '('; index after the matching ')', or -1."""
    depth = 0
    while i < len(text):
        if text[i] == '(':
            depth += 1
        elif text[i] == ')':
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def is_definition_at(text, paren):
    """The parameter list opening at paren is followed by a function body."""
    end = skip_balanced(text, paren)
    if end < 0:
        return False
    rest = text[end:end + 400]
    # Attributes and annotation macros between the list and the body.
    rest = re.sub(r'^(?:\s*(?:G_GNUC_\w+|G_\w+_FUNC|__\w+__|[A-Z_]{4,})'
                  r'(?:\s*\((?:[^()]|\([^()]*\))*\))?)*', '', rest)
    m = re.match(r'\s*(\{|;|,|=|\))', rest)
    if m:
        return m.group(1) == '{'
    # K&R parameter declarations.
    return bool(re.match(r'\s*[A-Za-z_][\w\s\*]*;[^{;]*\{', rest))


def prepare_c(text):
    """C source without comments and __attribute__ ((...))."""
    return ATTRIBUTE_RE.sub(lambda m: ' ' * len(m.group(0)),
                            strip_c_comments(text))


def defines_function(text, name):
    """A C definition of name in text (from prepare_c): GNU style (name at
    the start of a line), return type on the same line, static inline, a
    macro, a check test, or a DEFINE_* macro taking the name."""
    q = re.escape(name)
    if re.search(r'^[ \t]*#[ \t]*define[ \t]+%s\b' % q, text, re.M):
        return True
    if re.search(r'^[ \t]*(?:GST_START_TEST|START_TEST)\s*\(\s*%s\s*\)' % q,
                 text, re.M):
        return True
    for m in re.finditer(r'^(?:[A-Za-z_][\w \t\*]*?[\s\*])?%s[ \t]*\(' % q,
                         text, re.M):
        head = m.group(0)
        if re.match(r'\s*(?:return|if|while|for|switch|else|case|do|goto|'
                    r'sizeof)\b', head):
            continue
        if is_definition_at(text, m.end() - 1):
            return True
    # Generated by a macro that takes the name: FOO_DEFINE_BAR (name, ...).
    return bool(re.search(r'^[ \t]*(?:[A-Z][A-Z0-9_]*DEFINE\w*|DEFINE_\w+)'
                          r'[ \t]*\([ \t]*%s\b' % q, text, re.M))


# ---------------------------------------------------------------------------
# Meson: a small evaluator for the subset used by test definitions

class Unknown:
    def __repr__(self):
        return '<unknown>'


UNKNOWN = Unknown()


class Target:
    def __init__(self, name, sources):
        self.name = name
        self.sources = sources


class MesonTest:
    def __init__(self, name, kind, suites, sources, where):
        self.name = name
        self.kind = kind
        self.suites = suites
        self.sources = sources
        self.where = where


TOKEN_RE = re.compile(r'''
    (?P<nl>\n)
  | (?P<ws>[ \t\r]+|\\\n)
  | (?P<comment>\#[^\n]*)
  | (?P<mstr>f?\'\'\'.*?\'\'\')
  | (?P<str>f?\'(?:\\.|[^\\\'\n])*\')
  | (?P<num>0[xob][0-9a-fA-F]+|\d+)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|\+=|[-+*/%<>=()\[\]{},:.?])
''', re.S | re.X)

KEYWORDS = {'if', 'elif', 'else', 'endif', 'foreach', 'endforeach', 'and',
            'or', 'not', 'in', 'true', 'false', 'break', 'continue'}


def tokenize(text):
    toks = []
    pos = 0
    line = 1
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if not m:
            raise SyntaxError('line %d: cannot read %r' % (line, text[pos:pos + 10]))
        kind = m.lastgroup
        val = m.group(kind)
        if kind in ('str', 'mstr'):
            fmt = val.startswith('f')
            body = val[1:] if fmt else val
            body = body[3:-3] if kind == 'mstr' else body[1:-1]
            if kind == 'str':
                body = re.sub(r'\\(.)', lambda e: {'n': '\n', 't': '\t'}.get(
                    e.group(1), e.group(1)), body)
            toks.append(('fstr' if fmt else 'str', body, line))
        elif kind == 'num':
            toks.append(('num', int(val, 0), line))
        elif kind == 'id':
            toks.append(('kw' if val in KEYWORDS else 'id', val, line))
        elif kind in ('op', 'nl'):
            toks.append((kind, val, line))
        line += val.count('\n')
        pos = m.end()
    toks.append(('eof', None, line))
    return toks


class MesonParser:
    """Parses meson.build files into statement trees."""

    def __init__(self, text):
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0   # inside brackets newlines are insignificant

    def peek(self):
        while True:
            t = self.toks[self.i]
            if t[0] == 'nl' and self.depth > 0:
                self.i += 1
                continue
            return t

    def next(self):
        t = self.peek()
        self.i += 1
        return t

    def accept(self, kind, val=None):
        t = self.peek()
        if t[0] == kind and (val is None or t[1] == val):
            self.i += 1
            return t
        return None

    def expect(self, kind, val=None):
        t = self.accept(kind, val)
        if t is None:
            got = self.peek()
            raise SyntaxError('line %d: expected %s, got %r'
                              % (got[2], val or kind, got[1]))
        return t

    def skip_newlines(self):
        while self.toks[self.i][0] == 'nl':
            self.i += 1

    def block(self, enders):
        stmts = []
        while True:
            self.skip_newlines()
            t = self.peek()
            if t[0] == 'eof' or (t[0] == 'kw' and t[1] in enders):
                return stmts
            stmts.append(self.statement())

    def statement(self):
        t = self.peek()
        if t == ('kw', 'foreach', t[2]):
            self.next()
            names = [self.expect('id')[1]]
            while self.accept('op', ','):
                names.append(self.expect('id')[1])
            self.expect('op', ':')
            seq = self.expr()
            body = self.block({'endforeach'})
            self.expect('kw', 'endforeach')
            return ('foreach', names, seq, body, t[2])
        if t == ('kw', 'if', t[2]):
            self.next()
            branches = []
            cond = self.expr()
            branches.append((cond, self.block({'elif', 'else', 'endif'})))
            while True:
                if self.accept('kw', 'elif'):
                    cond = self.expr()
                    branches.append((cond, self.block({'elif', 'else', 'endif'})))
                elif self.accept('kw', 'else'):
                    branches.append((None, self.block({'endif'})))
                else:
                    break
            self.expect('kw', 'endif')
            return ('if', branches, t[2])
        if t[0] == 'kw' and t[1] in ('break', 'continue'):
            self.next()
            return ('nop', t[2])
        if t[0] == 'id':
            nxt = self.toks[self.i + 1]
            if nxt[0] == 'op' and nxt[1] in ('=', '+='):
                self.next()
                self.next()
                return ('assign', t[1], nxt[1], self.expr(), t[2])
        return ('expr', self.expr(), t[2])

    # Expressions -----------------------------------------------------------
    def expr(self):
        e = self.or_expr()
        if self.accept('op', '?'):
            a = self.expr()
            self.expect('op', ':')
            b = self.expr()
            return ('ternary', e, a, b)
        return e

    def or_expr(self):
        e = self.and_expr()
        while self.accept('kw', 'or'):
            e = ('bool', e, self.and_expr())
        return e

    def and_expr(self):
        e = self.not_expr()
        while self.accept('kw', 'and'):
            e = ('bool', e, self.not_expr())
        return e

    def not_expr(self):
        if self.accept('kw', 'not'):
            return ('not', self.not_expr())
        return self.cmp_expr()

    def cmp_expr(self):
        e = self.add_expr()
        while True:
            t = self.peek()
            if (t[0] == 'op' and t[1] in ('==', '!=', '<', '>', '<=', '>=')) \
                    or (t[0] == 'kw' and t[1] == 'in'):
                self.next()
                e = ('cmp', e, self.add_expr())
            elif t == ('kw', 'not', t[2]) and self.toks[self.i + 1][1] == 'in':
                self.next()
                self.next()
                e = ('cmp', e, self.add_expr())
            else:
                return e

    def add_expr(self):
        e = self.mul_expr()
        while True:
            t = self.peek()
            if t[0] == 'op' and t[1] in ('+', '-'):
                self.next()
                e = ('bin', t[1], e, self.mul_expr())
            else:
                return e

    def mul_expr(self):
        e = self.unary()
        while True:
            t = self.peek()
            if t[0] == 'op' and t[1] in ('*', '/', '%'):
                self.next()
                e = ('bin', t[1], e, self.unary())
            else:
                return e

    def unary(self):
        if self.accept('op', '-'):
            return ('neg', self.unary())
        return self.postfix()

    def args(self, close):
        pos, kw = [], {}
        self.depth += 1
        while not self.accept('op', close):
            t = self.peek()
            nxt = self.toks[self.i + 1]
            if t[0] == 'id' and nxt[0] == 'op' and nxt[1] == ':':
                self.next()
                self.next()
                kw[t[1]] = self.expr()
            else:
                pos.append(self.expr())
            if not self.accept('op', ','):
                self.expect('op', close)
                break
        self.depth -= 1
        return pos, kw

    def postfix(self):
        e = self.primary()
        while True:
            if self.accept('op', '('):
                pos, kw = self.args(')')
                e = ('call', e, pos, kw)
            elif self.accept('op', '.'):
                name = self.expect('id')[1]
                self.expect('op', '(')
                pos, kw = self.args(')')
                e = ('method', e, name, pos, kw)
            elif self.accept('op', '['):
                self.depth += 1
                idx = self.expr()
                self.depth -= 1
                self.expect('op', ']')
                e = ('index', e, idx)
            else:
                return e

    def primary(self):
        t = self.next()
        if t[0] == 'str':
            return ('lit', t[1])
        if t[0] == 'fstr':
            return ('fstr', t[1])
        if t[0] == 'num':
            return ('lit', t[1])
        if t[0] == 'kw' and t[1] in ('true', 'false'):
            return ('lit', t[1] == 'true')
        if t[0] == 'id':
            return ('var', t[1])
        if t == ('op', '(', t[2]):
            self.depth += 1
            e = self.expr()
            self.depth -= 1
            self.expect('op', ')')
            return e
        if t == ('op', '[', t[2]):
            items = []
            self.depth += 1
            while not self.accept('op', ']'):
                items.append(self.expr())
                if not self.accept('op', ','):
                    self.expect('op', ']')
                    break
            self.depth -= 1
            return ('list', items)
        if t == ('op', '{', t[2]):
            items = []
            self.depth += 1
            while not self.accept('op', '}'):
                k = self.expr()
                self.expect('op', ':')
                items.append((k, self.expr()))
                if not self.accept('op', ','):
                    self.expect('op', '}')
                    break
            self.depth -= 1
            return ('dict', items)
        raise SyntaxError('line %d: unexpected %r' % (t[2], t[1]))


class MesonEval:
    """Runs the statements for what defines tests.  Both branches of every
    `if` are taken: a test defined under a condition still exists."""

    def __init__(self, root):
        self.root = root
        self.vars = {}
        self.tests = []
        self.unresolved = []
        self.errors = []
        self.seen = set()
        self.line = 0

    def run_file(self, rel_dir):
        path = os.path.join(self.root, rel_dir, 'meson.build')
        if path in self.seen or not os.path.isfile(path):
            return
        self.seen.add(path)
        try:
            stmts = MesonParser(read_text(path)).block(set())
        except SyntaxError as e:
            self.errors.append('%s: %s' % (os.path.relpath(path, self.root), e))
            return
        self.exec_block(stmts, rel_dir)

    def exec_block(self, stmts, d):
        for s in stmts:
            try:
                self.exec_stmt(s, d)
            except RecursionError:
                raise
            except Exception as e:   # keep going: one odd statement
                self.errors.append('%s/meson.build:%s: %s' % (d, s[-1], e))

    def exec_stmt(self, s, d):
        kind = s[0]
        self.line = s[-1]
        if kind == 'assign':
            _, name, op, e, _ = s
            v = self.ev(e, d)
            if op == '+=':
                old = self.vars.get(name, UNKNOWN)
                v = self.add(old, v)
            self.vars[name] = v
        elif kind == 'expr':
            self.ev(s[1], d)
        elif kind == 'if':
            for _, body in s[1]:
                self.exec_block(body, d)
        elif kind == 'foreach':
            _, names, seq, body, _ = s
            items = self.ev(seq, d)
            if isinstance(items, dict) and len(names) == 2:
                for k, v in items.items():
                    self.vars[names[0]], self.vars[names[1]] = k, v
                    self.exec_block(body, d)
            elif isinstance(items, list) and len(names) == 1:
                for v in items:
                    self.vars[names[0]] = v
                    self.exec_block(body, d)
            else:
                for n in names:
                    self.vars[n] = UNKNOWN
                self.exec_block(body, d)

    @staticmethod
    def add(a, b):
        if isinstance(a, str) and isinstance(b, str):
            return a + b
        if isinstance(a, int) and isinstance(b, int) \
                and not isinstance(a, bool):
            return a + b
        if isinstance(a, list):
            return a + (b if isinstance(b, list) else [b])
        if isinstance(a, dict) and isinstance(b, dict):
            return dict(a, **b)
        return UNKNOWN

    def sources_of(self, values, d):
        out = []
        for v in values:
            if isinstance(v, list):
                out += self.sources_of(v, d)
            elif isinstance(v, str):
                out.append(os.path.normpath(os.path.join(d, v)))
            elif isinstance(v, Target):
                out += v.sources
        return out

    def ev(self, e, d):
        k = e[0]
        if k == 'lit':
            return e[1]
        if k == 'fstr':
            if re.search(r'@\w+@', e[1]):
                return UNKNOWN
            return e[1]
        if k == 'var':
            return self.vars.get(e[1], UNKNOWN)
        if k == 'list':
            return [self.ev(x, d) for x in e[1]]
        if k == 'dict':
            out = {}
            for kk, vv in e[1]:
                key = self.ev(kk, d)
                if isinstance(key, str):
                    out[key] = self.ev(vv, d)
            return out
        if k == 'bin':
            a, b = self.ev(e[2], d), self.ev(e[3], d)
            if e[1] == '+':
                return self.add(a, b)
            if e[1] == '/' and isinstance(a, str) and isinstance(b, str):
                return b if b.startswith('/') else a.rstrip('/') + '/' + b
            return UNKNOWN
        if k == 'ternary':
            self.ev(e[1], d)
            return UNKNOWN
        if k in ('bool', 'not', 'cmp', 'neg'):
            return UNKNOWN
        if k == 'index':
            a, i = self.ev(e[1], d), self.ev(e[2], d)
            try:
                return a[i]
            except Exception:
                return UNKNOWN
        if k == 'method':
            return self.method(self.ev(e[1], d), e[1], e[2],
                               [self.ev(x, d) for x in e[3]], d)
        if k == 'call':
            fn = e[1]
            pos = [self.ev(x, d) for x in e[2]]
            kw = {n: self.ev(x, d) for n, x in e[3].items()}
            if fn[0] != 'var':
                return UNKNOWN
            return self.call(fn[1], pos, kw, d, e)
        return UNKNOWN

    def method(self, obj, obj_expr, name, args, d):
        if obj_expr == ('var', 'meson'):
            if name in ('project_source_root', 'source_root',
                        'global_source_root'):
                return self.root
            if name == 'current_source_dir':
                return os.path.join(self.root, d)
            return UNKNOWN
        if isinstance(obj, str):
            try:
                if name == 'replace' and len(args) == 2:
                    return obj.replace(args[0], args[1])
                if name == 'underscorify':
                    return re.sub(r'[^A-Za-z0-9]', '_', obj)
                if name == 'to_upper':
                    return obj.upper()
                if name == 'to_lower':
                    return obj.lower()
                if name == 'strip':
                    return obj.strip(*args[:1])
                if name == 'split':
                    return obj.split(*args[:1]) if args else obj.split()
                if name == 'join' and len(args) == 1:
                    return obj.join(args[0])
                if name == 'format':
                    return re.sub(r'@(\d+)@',
                                  lambda m: str(args[int(m.group(1))]), obj)
            except Exception:
                return UNKNOWN
        return UNKNOWN

    def call(self, name, pos, kw, d, e):
        if name == 'subdir' and pos and isinstance(pos[0], str):
            self.run_file(os.path.normpath(os.path.join(d, pos[0])))
            return UNKNOWN
        if name == 'files':
            return self.sources_of(pos, d)
        if name == 'join_paths':
            if all(isinstance(p, str) for p in pos):
                return os.path.join(*pos) if pos else ''
            return UNKNOWN
        if name in ('executable', 'static_library', 'shared_library',
                    'library', 'both_libraries', 'shared_module',
                    'build_target'):
            return Target(pos[0] if pos else UNKNOWN,
                          self.sources_of(pos[1:], d)
                          + self.sources_of([kw.get('sources', [])], d))
        if name == 'find_program':
            for p in pos:
                if isinstance(p, str) and os.path.isfile(
                        os.path.join(self.root, d, p)):
                    return Target(p, [os.path.normpath(os.path.join(d, p))])
            return Target(pos[0] if pos else UNKNOWN, [])
        if name in ('test', 'benchmark'):
            test_name = pos[0] if pos else UNKNOWN
            where = '%s:%d' % (os.path.join(d, 'meson.build'), self.line)
            prog = pos[1] if len(pos) > 1 else UNKNOWN
            sources = prog.sources if isinstance(prog, Target) else []
            suites = kw.get('suite', [])
            if isinstance(suites, str):
                suites = [suites]
            suites = [s for s in suites if isinstance(s, str)]
            if isinstance(test_name, str):
                self.tests.append(MesonTest(test_name, name, suites, sources,
                                            where))
            else:
                self.unresolved.append(os.path.join(d, 'meson.build'))
            return UNKNOWN
        return UNKNOWN


def meson_tests_from_sources(root):
    ev = MesonEval(root)
    ev.run_file('tests')
    return ev


def meson_tests_from_build(build_dir):
    """(name, kind, suites) from the build dir's introspection data."""
    out = []
    info = os.path.join(build_dir, 'meson-info')
    data = {}
    for kind, key in (('test', 'tests'), ('benchmark', 'benchmarks')):
        path = os.path.join(info, 'intro-%s.json' % key)
        if os.path.isfile(path):
            with open(path, encoding='utf-8') as f:
                data[kind] = json.load(f)
    if len(data) < 2:
        meson = shutil.which('meson')
        if meson is None or not os.path.isdir(build_dir):
            raise RuntimeError('no meson-info in %s and no meson to ask'
                               % build_dir)
        res = subprocess.run([meson, 'introspect', '--tests', '--benchmarks',
                              build_dir], capture_output=True, text=True,
                             check=True)
        intro = json.loads(res.stdout)
        data = {'test': intro.get('tests', []),
                'benchmark': intro.get('benchmarks', [])}
    for kind, items in data.items():
        for t in items:
            suites = [s.split(':', 1)[-1] for s in t.get('suite', [])]
            out.append((t['name'], kind, suites))
    return out


# ---------------------------------------------------------------------------
# What the tests register

GTEST_ADD_RE = re.compile(r'\bg_test_add(?:_func|_data_func(?:_full)?|_vtable)?'
                          r'\s*\(\s*')
REGISTER_RE = r'\b(?:tcase_add_\w*|g_test_add\w*|suite_add\w*|srunner_\w+)\s*\('


class TestSources:
    def __init__(self, root, files):
        # Registered GLib paths: (components, text, file); a component is a
        # literal, or a regex where the path is built with g_strdup_printf.
        self.paths = []
        self.cfiles = {}     # file -> comment-stripped text
        for rel in files:
            parts = rel.split(os.sep)
            if parts[0] != 'tests' or rel.rsplit('.', 1)[-1] not in C_EXTS:
                continue
            text = prepare_c(read_text(os.path.join(root, rel)))
            self.cfiles[rel] = text
            dynamic = False
            for m in GTEST_ADD_RE.finditer(text):
                lit = re.match(r'((?:"(?:\\.|[^"\\])*"\s*)+)', text[m.end():])
                if lit:
                    path = ''.join(re.findall(r'"((?:\\.|[^"\\])*)"',
                                              lit.group(1)))
                    comps = [re.escape(c) for c in path.strip('/').split('/')]
                    self.paths.append((comps, path, rel))
                else:
                    dynamic = True
            if dynamic:
                # Paths built at run time: the formats that make them.
                for m in re.finditer(r'\bg_strdup_printf\s*\(\s*"(/[^"]*)"',
                                     text):
                    fmt = m.group(1)
                    comps = []
                    for c in fmt.strip('/').split('/'):
                        pieces = re.split(r'%[-+ #0-9.*]*[hlLqjzt]*[a-zA-Z]',
                                          c.replace('%%', '%'))
                        comps.append('.+'.join(re.escape(x) for x in pieces))
                    self.paths.append((comps, fmt, rel))
        self.roots = {p.strip('/').split('/')[0] for _, p, _ in self.paths}

    def files_registering(self, cited):
        """Files registering cited: the path itself, or paths under it (as
        -p takes a prefix); a * in cited matches within one component."""
        want = cited.strip('/').split('/')
        found = set()
        for comps, _, rel in self.paths:
            if len(want) > len(comps):
                continue
            ok = True
            for w, c in zip(want, comps):
                if w == '*':
                    continue
                if re.fullmatch(c, w.replace('*', 'x')) is None and (
                        '*' not in w or re.fullmatch(
                            '.*'.join(re.escape(x) for x in w.split('*')),
                            re.sub(r'\\(.)', r'\1', c)) is None):
                    ok = False
                    break
            if ok:
                found.add(rel)
        return found

    def files_defining(self, name):
        out = set()
        for rel, text in self.cfiles.items():
            if name in text and defines_function(text, name):
                out.add(rel)
        return out

    def registered(self, name, files):
        rx = re.compile(REGISTER_RE + r'[^;]*?\b%s\b' % re.escape(name), re.S)
        return any(rx.search(self.cfiles[f]) for f in files)


# ---------------------------------------------------------------------------
# Manuals

class Block:
    def __init__(self, kind, section, lines):
        self.kind = kind          # 'bullet', 'row', 'para', 'heading'
        self.section = section
        self.parts = lines        # [(line number, text)]
        self.text = ''
        self.offsets = []         # (offset in text, line number)
        for no, t in lines:
            if self.text:
                self.text += ' '
            self.offsets.append((len(self.text), no))
            self.text += t.strip()

    def line_at(self, off):
        no = self.offsets[0][1]
        for o, n in self.offsets:
            if o <= off:
                no = n
        return no


BULLET_RE = re.compile(r'^\s*(?:[-*+]|\d+[.)])\s+')


def blocks_of(text):
    section = ''
    out = []
    cur = None
    fence = None
    for no, line in enumerate(text.split('\n'), 1):
        s = line.strip()
        if fence is not None:
            if s.startswith(fence):
                fence = None
            continue
        if s.startswith('```') or s.startswith('~~~'):
            fence = s[:3]
            cur = None
            continue
        if not s:
            cur = None
            continue
        m = re.match(r'^(#+)\s+(.*)$', s)
        if m:
            if len(m.group(1)) <= 2:
                section = m.group(2).strip()
            out.append(Block('heading', section, [(no, s)]))
            cur = None
            continue
        if s.startswith('|'):
            if re.match(r'^\|[\s|:-]*\|?$', s):
                cur = None
                continue
            out.append(Block('row', section, [(no, s)]))
            cur = None
            continue
        if BULLET_RE.match(line):
            cur = Block('bullet', section, [(no, BULLET_RE.sub('', line))])
            out.append(cur)
            continue
        if cur is None:
            cur = Block('para', section, [(no, s)])
            out.append(cur)
        else:
            cur.parts.append((no, s))
            cur.offsets.append((len(cur.text) + 1, no))
            cur.text += ' ' + s
    return out


def backtick_spans(text):
    """(start, end, content) of each `code span`."""
    out = []
    for m in re.finditer(r'(`+)(.+?)\1', text):
        out.append((m.start(), m.end(), m.group(2).strip()))
    return out


FILE_FUNC_RE = re.compile(
    r'(?<![\w/.\-:$@])((?:[\w.+-]+/)*[\w+-][\w.+-]*\.(?:%s)):(%s)(?:\(\))?'
    % ('|'.join(C_EXTS), IDENT))
MORE_FUNC_RE = re.compile(r'\s*(,\s*(?:and\s+)?|\s+and\s+)(%s)(?:\(\))?' % IDENT)
FUNC_END_RE = re.compile(r'(?:\s*$|\s*[,;)|`\]]|\.(?:\s|$)|\s+\(|\s+(?:and|or)\s)')
BARE_PATH_RE = re.compile(
    r'(?<![\w/.\-:$@~])((?:[\w.+-]+/)+[\w+-][\w.+-]*\.(?:%s))'
    r'(?![\w/-]|:[A-Za-z_])'
    % '|'.join(sorted(set(FILE_EXTS), key=len, reverse=True)))
TEST_NAME_RE = re.compile(r'^[a-z0-9][a-z0-9_.+*-]*$')
GLIB_PATH_RE = re.compile(r'^/[\w.*{},+-]*(?:/[\w.*{},+-]*)*$')


def expand_braces(s):
    m = re.search(r'\{([^{}]*)\}', s)
    if not m:
        return [s]
    out = []
    for alt in m.group(1).split(','):
        out += expand_braces(s[:m.start()] + alt.strip() + s[m.end():])
    return out


class Checker:
    def __init__(self, root, build_dir):
        self.root = os.path.realpath(root)
        skip = {os.path.realpath(build_dir)} if build_dir else set()
        self.files = walk_tree(self.root, skip)
        self.file_set = set(self.files)
        self.top_dirs = {f.split(os.sep)[0] for f in self.files
                         if os.sep in f}
        self.texts = {}
        self.notes = []

        ev = meson_tests_from_sources(self.root)
        for err in ev.errors:
            self.notes.append('note: could not read %s' % err)
        for where in sorted(set(ev.unresolved)):
            self.notes.append('note: %s defines a test whose name could not '
                              'be worked out' % where)
        self.tests = {}
        for t in ev.tests:
            cur = self.tests.setdefault(t.name, MesonTest(
                t.name, t.kind, [], [], t.where))
            cur.suites += t.suites
            cur.sources += t.sources
        if build_dir:
            for name, kind, suites in meson_tests_from_build(build_dir):
                cur = self.tests.setdefault(name, MesonTest(
                    name, kind, [], [], 'introspection'))
                cur.suites += suites
        self.suites = {s for t in self.tests.values() for s in t.suites}
        # Families of tests: prefixes ending in '-' that two or more share.
        counts = {}
        for name in self.tests:
            for i, c in enumerate(name):
                if c == '-' and i > 0:
                    counts[name[:i + 1]] = counts.get(name[:i + 1], 0) + 1
        self.families = {p for p, n in counts.items() if n >= 2}
        self.test_sources = TestSources(self.root, self.files)
        self.source_owner = {}
        for t in self.tests.values():
            for s in t.sources:
                self.source_owner.setdefault(s, set()).add(t.name)

    # File and function references -----------------------------------------
    def resolve(self, path):
        """(relative path, None) or (None, problem)."""
        path = os.path.normpath(path.replace('/', os.sep))
        if path in self.file_set:
            return path, None
        suffix = os.sep + path
        hits = [f for f in self.files if f.endswith(suffix)]
        if len(hits) == 1:
            return hits[0], None
        if not hits:
            return None, 'no file %s in the source tree' % path
        return None, '%s is ambiguous: %s' % (path, ', '.join(hits))

    def text_of(self, rel):
        if rel not in self.texts:
            self.texts[rel] = prepare_c(read_text(os.path.join(self.root, rel)))
        return self.texts[rel]

    def check_file_funcs(self, block, manual, refs):
        text = block.text
        claimed = []
        for m in FILE_FUNC_RE.finditer(text):
            path = m.group(1)
            funcs = [(m.group(2), m.start())]
            pos = m.end()
            while True:
                mm = MORE_FUNC_RE.match(text, pos)
                if not mm:
                    break
                name = mm.group(2)
                if not FUNC_END_RE.match(text, mm.end()):
                    break
                # "and" joins plain words too: take only code-like names.
                if 'and' in mm.group(1) and '_' not in name \
                        and not text.startswith('()', mm.end() - 2):
                    break
                funcs.append((name, mm.start(2)))
                pos = mm.end()
            claimed.append((m.start(), m.end()))
            rel, problem = self.resolve(path)
            for name, off in funcs:
                r = Ref(manual, block.line_at(off), 'file:function',
                        '%s:%s' % (path, name), off)
                refs.append(r)
                if problem:
                    r.problem = problem
                elif not defines_function(self.text_of(rel), name):
                    r.problem = 'no definition of %s() in %s' % (name, rel)
        for m in BARE_PATH_RE.finditer(text):
            if any(a <= m.start() < b for a, b in claimed):
                continue
            path = m.group(1)
            first = path.split('/')[0]
            rel, problem = self.resolve(path)
            if problem and first not in self.top_dirs:
                continue        # not a path of this tree (build/, $OUT/...)
            r = Ref(manual, block.line_at(m.start()), 'file', path, m.start())
            r.problem = problem
            refs.append(r)

    # Test references -------------------------------------------------------
    def check_meson_test(self, r, name):
        if '*' in name:
            rx = re.compile('.*'.join(re.escape(x) for x in name.split('*')))
            if not any(rx.fullmatch(t) for t in self.tests):
                r.problem = 'no meson test or benchmark matches %s' % name
        elif name not in self.tests:
            r.problem = 'no meson test or benchmark named %s' % name

    def check_glib_path(self, r, path, owners):
        found = self.test_sources.files_registering(path)
        if not found:
            r.problem = 'no g_test_add* call under tests/ registers %s' % path
            return
        self.check_owner(r, path, found, owners, 'registered')

    def check_c_test(self, r, name, owners):
        found = self.test_sources.files_defining(name)
        if not found:
            r.problem = 'no definition of %s under tests/' % name
            return
        if not self.test_sources.registered(name, found):
            r.problem = '%s is defined in %s but never added to a test case' \
                % (name, ', '.join(sorted(found)))
            return
        self.check_owner(r, name, found, owners, 'defined')

    def check_owner(self, r, what, found, owners, verb):
        """A bullet that opens with meson tests cites what they run."""
        owners = [o for o in owners if o in self.tests and
                  self.tests[o].sources]
        if not owners:
            return
        mine = {s for o in owners for s in self.tests[o].sources}
        if found & mine:
            return
        # Only a clear mismatch: found solely in sources of other tests.
        if all(f in self.source_owner for f in found):
            r.problem = '%s is %s in %s, not in the sources of %s' % (
                what, verb, ', '.join(sorted(found)),
                ', '.join('`%s`' % o for o in owners))

    def check_tests(self, block, manual, refs):
        text = block.text
        breakit = block.section.lower().startswith('break-it')
        spans = backtick_spans(text)
        done = set()
        owners = []

        def add(kind, tok, off):
            r = Ref(manual, block.line_at(off), kind, tok, off)
            refs.append(r)
            return r

        def classify(tok, start, end, leading):
            if tok.startswith('/'):
                root = tok.split('/')[1] if len(tok) > 1 else ''
                if not GLIB_PATH_RE.match(tok) or root in FS_ROOTS:
                    return
                if not (breakit or root in self.test_sources.roots):
                    return
                for p in expand_braces(tok):
                    r = add('GLib test path', p, start)
                    self.check_glib_path(r, p, owners)
                # `/x/*` (a, b, c): the components the wildcard stands for.
                if tok.endswith('/*'):
                    m = re.match(r'\s*\(([\w.+-]+(?:\s*,\s*[\w.+-]+)+)\)',
                                 text[end:])
                    if m:
                        for item in re.split(r'\s*,\s*', m.group(1)):
                            p = tok[:-1] + item
                            r = add('GLib test path', p, start)
                            self.check_glib_path(r, p, owners)
                return
            if re.fullmatch(r'test_\w+', tok):
                r = add('C test', tok, start)
                self.check_c_test(r, tok, owners)
                return
            if not TEST_NAME_RE.match(tok):
                return
            suite_ctx = re.search(r'\bsuites?\s+$', text[:start])
            if suite_ctx:
                r = add('meson suite', tok, start)
                if tok not in self.suites:
                    r.problem = 'no meson suite named %s' % tok
                return
            family = any(tok.startswith(p) and len(tok) > len(p)
                         for p in self.families)
            if leading or tok in self.tests or family:
                r = add('meson test', tok, start)
                self.check_meson_test(r, tok)
                if leading:
                    owners.append(tok)
                if r.problem or tok not in self.tests:
                    return
                after = text[end:]
                m = re.match(r'\s*\((?:in\s+)?suite\s+`([^`]+)`\)', after)
                if m and m.group(1) in self.suites and \
                        m.group(1) not in self.tests[tok].suites:
                    r.problem = '%s is not in suite %s' % (tok, m.group(1))
                if re.match(r'\s*\(benchmark\)', after) and \
                        self.tests[tok].kind != 'benchmark':
                    r.problem = '%s is a test, not a benchmark' % tok
                elif re.match(r'\s*\((?:suite|test)\b', after) and \
                        self.tests[tok].kind == 'benchmark':
                    r.problem = '%s is a benchmark, not a test' % tok

        # The names that open a Break-it bullet: `a`, `b`: ... or `a` (...)
        if breakit and block.kind == 'bullet':
            pos = 0
            for start, end, tok in spans:
                gap = text[pos:start]
                if (pos == 0 and gap.strip()) or \
                        (pos and not re.fullmatch(r'\s*(?:,|,?\s*and|or|/)\s*', gap)):
                    break
                if re.search(r'\s', tok):
                    break
                classify(tok, start, end, True)
                done.add(start)
                pos = end
        for start, end, tok in spans:
            if start not in done:
                classify(tok, start, end, False)

    def check_manual(self, path, label):
        refs = []
        for block in blocks_of(read_text(path)):
            if block.kind == 'heading':
                continue
            found = []
            self.check_file_funcs(block, label, found)
            self.check_tests(block, label, found)
            # A sentence on what is not done yet may name what does not
            # exist yet.
            for m in re.finditer(r'\bnot yet\b', block.text, re.I):
                end = re.compile(r'\.(?:\s+(?=[A-Z(`])|$)').search(
                    block.text, m.end())
                end = end.end() if end else len(block.text)
                found = [r for r in found if not m.start() <= r.off < end]
            refs += sorted(found, key=lambda r: (r.line, r.off))
        return refs


def main():
    ap = argparse.ArgumentParser(
        description='Check the references of the operator manuals.')
    ap.add_argument('source_root')
    ap.add_argument('build_dir', nargs='?')
    ap.add_argument('--manuals', help='directory of the manuals '
                    '(default SOURCE_ROOT/docs/operator)')
    ap.add_argument('--expect', help='file listing the broken references '
                    'expected, MANUAL:LINE: REFERENCE a line; exit 0 only '
                    'when exactly those are broken')
    ap.add_argument('-v', '--verbose', action='store_true',
                    help='print every reference checked')
    a = ap.parse_args()

    manuals_dir = a.manuals or os.path.join(a.source_root, 'docs', 'operator')
    if not os.path.isdir(manuals_dir):
        print('no manuals directory %s' % manuals_dir, file=sys.stderr)
        return 2
    manuals = sorted(f for f in os.listdir(manuals_dir) if f.endswith('.md'))
    if not manuals:
        print('no manuals in %s' % manuals_dir, file=sys.stderr)
        return 2

    try:
        checker = Checker(a.source_root, a.build_dir)
    except (OSError, RuntimeError, ValueError,
            subprocess.CalledProcessError) as e:
        print('cannot read the tests of %s: %s' % (a.source_root, e),
              file=sys.stderr)
        return 2
    for n in checker.notes:
        print(n)
    if not checker.tests:
        print('no meson tests found: cannot check test citations',
              file=sys.stderr)
        return 2

    refs = []
    for m in manuals:
        path = os.path.join(manuals_dir, m)
        label = os.path.relpath(path, a.source_root)
        if label.startswith('..'):
            label = path
        refs += checker.check_manual(path, label)

    broken = [r for r in refs if r.problem]
    for r in refs:
        if a.verbose and not r.problem:
            print('%s:%d: ok: %s %s' % (r.manual, r.line, r.kind, r.text))
    for r in broken:
        print('%s:%d: broken %s reference %s: %s'
              % (r.manual, r.line, r.kind, r.text, r.problem))
    kinds = {}
    for r in refs:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    print('checked %d references in %d manuals (%s): %d broken'
          % (len(refs), len(manuals),
             ', '.join('%d %s' % (n, k) for k, n in sorted(kinds.items())),
             len(broken)))

    if a.expect:
        want = set()
        want_count = None
        with open(a.expect, encoding='utf-8') as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith('#'):
                    continue
                m = re.fullmatch(r'checked:\s*(\d+)', line)
                if m:
                    want_count = int(m.group(1))
                    continue
                man, no, ref = line.split(':', 2)
                want.add((man, int(no), ref.strip()))
        got = {(os.path.basename(r.manual), r.line, r.text) for r in broken}
        for w in sorted(want - got):
            print('expected broken, not reported: %s:%d: %s' % w)
        for g in sorted(got - want):
            print('reported broken, not expected: %s:%d: %s' % g)
        ok = want == got
        if want_count is not None and want_count != len(refs):
            print('expected %d references checked, not %d'
                  % (want_count, len(refs)))
            ok = False
        if not ok:
            return 1
        print('the broken references are exactly the %d expected' % len(want))
        return 0
    return 1 if broken else 0


if __name__ == '__main__':
    sys.exit(main())

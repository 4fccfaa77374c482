#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Counts the schedules of the exhaustive search over two bodies of tests/test_explore.cpp, apart
from the explorer's code: an enumeration of the same decisions, from the explorer's semantics
(docs/design.md, "The schedule explorer"). Choosing a thread runs its pending operation (a new
thread's first one); a decision follows every executed operation, every block and every thread
end; choosing another thread while the current one can go on is a preemption; decisions with
one runnable thread are no choice. The test's expected counts are this script's output:

  python3 tests/support/explore_count.py
"""

class Sim:
    def __init__(self, body_factory):
        self.shared = {}
        self.threads = {}   # id -> dict(gen, pending, state)
        self.body_factory = body_factory

    def spawn(self, gen):
        tid = len(self.threads)
        t = {'gen': gen, 'pending': None, 'state': 'runnable', 'waits': None}
        self.threads[tid] = t
        t['pending'] = next(gen)  # run local code up to the first op
        return tid

    def advance(self, tid, value):
        t = self.threads[tid]
        try:
            t['pending'] = t['gen'].send(value)
        except StopIteration:
            t['pending'] = None
            t['state'] = 'finished'
            for u in self.threads.values():
                if u['state'] == 'blocked' and u['waits'] == tid:
                    u['state'] = 'runnable'

    def execute(self, tid):
        """Runs tid's pending op. Returns 'blocked' if it blocked."""
        t = self.threads[tid]
        op = t['pending']
        s = self.shared
        kind = op[0]
        if kind == 'spawn':
            new = self.spawn(op[1](self))
            self.advance(tid, new)
        elif kind == 'join':
            if self.threads[op[1]]['state'] != 'finished':
                t['state'] = 'blocked'; t['waits'] = op[1]
                return 'blocked'
            self.advance(tid, None)
        elif kind == 'load':
            self.advance(tid, s[op[1]])
        elif kind == 'fetch_add':
            old = s[op[1]]; s[op[1]] = old + op[2]; self.advance(tid, old)
        elif kind == 'cas':
            var, expected, desired = op[1], op[2], op[3]
            if s[var] == expected:
                s[var] = desired; self.advance(tid, (True, expected))
            else:
                self.advance(tid, (False, s[var]))
        elif kind == 'store':
            s[op[1]] = op[2]; self.advance(tid, None)
        else:
            raise ValueError(op)
        return 'ok'

def run(body_factory, prefix, bound):
    """Follows prefix at the branching decisions; returns ('leaf', None) or ('branch', options) at
    the first branching decision past the prefix."""
    sim = Sim(body_factory)
    sim.spawn(body_factory(sim))
    cur = 0
    pre = 0
    i = 0
    result = sim.execute(cur)   # thread 0's first op: no decision
    while True:
        enabled = [k for k, t in sim.threads.items() if t['state'] == 'runnable']
        if not enabled:
            assert all(t['state'] == 'finished' for t in sim.threads.values()), 'deadlock'
            return ('leaf', pre)
        cur_enabled = sim.threads[cur]['state'] == 'runnable'
        if len(enabled) > 1:
            opts = ([cur] if cur_enabled else []) + [k for k in enabled if k != cur]
            if i == len(prefix):
                allowed = [o for o in opts if not (cur_enabled and o != cur and pre + 1 > bound)]
                return ('branch', allowed)
            nxt = prefix[i]; i += 1
            if cur_enabled and nxt != cur:
                pre += 1
        else:
            nxt = enabled[0]
        cur = nxt
        sim.execute(cur)

def count(body_factory, bound, prefix=()):
    kind, val = run(body_factory, list(prefix), bound)
    if kind == 'leaf':
        return 1
    return sum(count(body_factory, bound, tuple(prefix) + (o,)) for o in val)

def fetch_add_body(sim):
    sim.shared['c'] = 0
    def inc(sim):
        yield ('fetch_add', 'c', 1)
    a = yield ('spawn', inc)
    b = yield ('spawn', inc)
    yield ('join', a)
    yield ('join', b)
    v = yield ('load', 'c')
    assert v == 2

def cas_body(sim):
    sim.shared['c'] = 0
    def inc2(sim):
        for _ in range(2):
            seen = yield ('load', 'c')
            while True:
                ok, seen = yield ('cas', 'c', seen, seen + 1)
                if ok:
                    break
    a = yield ('spawn', inc2)
    b = yield ('spawn', inc2)
    yield ('join', a)
    yield ('join', b)
    v = yield ('load', 'c')
    assert v == 4

for k in (0, 1, 2, 5):
    print('fetch_add k=%d: %d' % (k, count(fetch_add_body, k)))
for k in (0, 1, 2):
    print('cas k=%d: %d' % (k, count(cas_body, k)))

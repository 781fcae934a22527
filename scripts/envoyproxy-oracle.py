#!/usr/bin/env python3
"""Checks Portero's ports of envoyproxy/ratelimit's tests against
envoyproxy/ratelimit itself (docs/envoy.md, "How these were checked").

Build its two commands from its source first, outside this repository:

    git clone https://github.com/envoyproxy/ratelimit /tmp/erl
    (cd /tmp/erl && go build -o /tmp/erl/bin/ ./src/service_cmd ./src/config_check_cmd)

then, from the repository's root:

    scripts/envoyproxy-oracle.py /tmp/erl/bin              # everything
    scripts/envoyproxy-oracle.py /tmp/erl/bin configs      # the loader's cases only
    scripts/envoyproxy-oracle.py /tmp/erl/bin basic.yaml   # some scenarios

configs runs config_check_cmd on every case directory of
internal/config/envoyconf/testdata/envoyproxy and compares what it accepts
with the envoyproxy column of TestEnvoyproxyConfigTests. A scenario of
internal/rls/testdata/envoyproxy runs, variant by variant, against a fresh
service_cmd on its own redis-server on loopback, through /json (grpc_only
steps are skipped), starting at the scenario's offset into the minute of
the real clock; every answer must equal the scenario's. Durations and
RateLimit-Reset of units above a minute cannot match the scenario's instant
on the real clock: they must equal the unit's length minus the Unix second's
offset in it at the call instead. Scenarios run in parallel; each waits up
to a minute for its offset. Exit status 1 when anything differs.
"""
import concurrent.futures, datetime, glob, json, os, re, shutil, socket, subprocess, sys, tempfile, threading, time
import urllib.error, urllib.request

import yaml

SCENARIOS = 'internal/rls/testdata/envoyproxy'
CONFIGS = 'internal/config/envoyconf/testdata/envoyproxy'
CONFIG_TEST = 'internal/config/envoyconf/envoyproxy_test.go'
DIV = {'HOUR': 3600, 'DAY': 86400, 'WEEK': 604800, 'MONTH': 2592000, 'YEAR': 31536000}


_ports, _ports_lock = set(), threading.Lock()


def free_port():
    """A loopback port no other scenario of this run was given."""
    with _ports_lock:
        while True:
            with socket.socket() as s:
                s.bind(('127.0.0.1', 0))
                port = s.getsockname()[1]
            if port not in _ports:
                _ports.add(port)
                return port


def wait_port(port):
    for _ in range(100):
        try:
            socket.create_connection(('127.0.0.1', port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError('nothing listens on port %d' % port)


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def big_units_off(resp, seconds):
    """Checks and removes what depends on the hour or longer: each such
    duration must be its unit's length minus the offset of one of seconds."""
    bad, big = [], False
    for st in resp.get('statuses', []):
        cl = st.get('currentLimit') or {}
        unit = cl.get('unit')
        if unit in DIV:
            big = True
            if 'durationUntilReset' in st:
                got = int(st.pop('durationUntilReset').rstrip('s'))
                if got not in [DIV[unit] - t % DIV[unit] for t in seconds]:
                    bad.append((unit, got))
    if big:
        for h in resp.get('responseHeadersToAdd') or []:
            if h['key'].lower().endswith('reset'):
                h['value'] = '*'
    return bad


def zeroless(v):
    """proto3 JSON leaves out zero values: so does the comparison."""
    if isinstance(v, dict):
        return {k: zeroless(x) for k, x in v.items() if x not in (0, '', None, [], {})}
    if isinstance(v, list):
        return [zeroless(x) for x in v]
    return v


def run_variant(path, sc, vi, bindir):
    env = dict(sc.get('env') or {})
    env.update((sc.get('variants') or [{}])[vi] or {})
    start = sc['start']
    if isinstance(start, str):
        start = datetime.datetime.fromisoformat(start.replace('Z', '+00:00'))
    if start.tzinfo is None:
        start = start.replace(tzinfo=datetime.timezone.utc)
    tmp = tempfile.mkdtemp(prefix='envoyproxy-oracle-')
    cfg = os.path.join(tmp, 'current', 'ratelimit', 'config')
    os.makedirs(cfg)

    def write(files):
        for name, content in (files or {}).items():
            p = os.path.join(cfg, name)
            if content is None:
                os.remove(p)
            else:
                with open(p, 'w') as f:
                    f.write(content)

    write(sc.get('files'))
    rport, hport = free_port(), free_port()
    redis = subprocess.Popen(['redis-server', '--port', str(rport), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
                             stdout=subprocess.DEVNULL)
    e = dict(os.environ)
    e.update({'RUNTIME_ROOT': os.path.join(tmp, 'current'), 'RUNTIME_SUBDIRECTORY': 'ratelimit', 'RUNTIME_WATCH_ROOT': 'false',
              'HOST': '127.0.0.1', 'PORT': str(hport), 'GRPC_HOST': '127.0.0.1', 'GRPC_PORT': str(free_port()),
              'DEBUG_HOST': '127.0.0.1', 'DEBUG_PORT': str(free_port()), 'REDIS_SOCKET_TYPE': 'tcp',
              'REDIS_URL': '127.0.0.1:%d' % rport, 'USE_STATSD': 'false', 'LOG_LEVEL': 'error',
              'FORCE_START_WITHOUT_INITIAL_CONFIG': 'true'})
    e.update({k: str(v) for k, v in env.items()})
    wait_port(rport)
    svc = subprocess.Popen([os.path.join(bindir, 'service_cmd')], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out, n, fails = [], 0, 0
    try:
        url = 'http://127.0.0.1:%d' % hport
        for _ in range(100):
            try:
                urllib.request.urlopen(url + '/healthcheck', timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        now = time.time()
        t0 = now - now % 60 + start.second + start.microsecond / 1e6
        if t0 < now + 0.5:
            t0 += 60
        at = 0.0
        for i, step in enumerate(sc['steps']):
            if step.get('at'):
                a = step['at']
                at = float(a[:-2]) / 1000 if a.endswith('ms') else float(a[:-1])
            time.sleep(max(0, t0 + at - time.time()))
            if 'files' in step:
                write(step['files'])
                continue
            if step.get('grpc_only'):
                continue
            where = 'step %d (%s)' % (i, step.get('note', ''))
            for _ in range(max(step.get('times') or 1, 1)):
                n += 1
                before = int(time.time())
                code, body = post(url + '/json', step['request'])
                after = int(time.time())
                if step.get('error'):
                    if code != 400:
                        fails += 1
                        out.append('  %s: %d %s, want 400' % (where, code, body[:300]))
                    continue
                want = json.loads(json.dumps(step['response']))
                wbad = big_units_off(want, [int(start.timestamp() + at)])
                try:
                    got = json.loads(body)
                    gbad = big_units_off(got, sorted({before, after}))
                except ValueError:
                    got, gbad = body, []
                wcode = 429 if want.get('overallCode') == 'OVER_LIMIT' else 200
                if wbad or gbad or code != wcode or zeroless(got) != zeroless(want):
                    fails += 1
                    out.append('  %s:\n    got  %d %s\n    want %d %s%s' % (where, code, json.dumps(zeroless(got))[:800], wcode,
                               json.dumps(zeroless(want))[:800], ' (durations: scenario %s, real clock %s)' % (wbad, gbad) if wbad or gbad else ''))
    finally:
        svc.kill()
        redis.kill()
        svc.wait()
        redis.wait()
        shutil.rmtree(tmp)
    out.insert(0, '%s variant %d: %d answers, %d differ' % (os.path.basename(path), vi, n, fails))
    return n, fails, '\n'.join(out)


def run_scenario(path, bindir):
    with open(path) as f:
        sc = yaml.safe_load(f)
    res = [run_variant(path, sc, vi, bindir) for vi in range(len(sc.get('variants') or [{}]))]
    return sum(r[0] for r in res), sum(r[1] for r in res), '\n'.join(r[2] for r in res)


def check_configs(bindir):
    with open(CONFIG_TEST) as f:
        table = re.findall(r'\{"(\w+)", (true|false), (true|false), (?:true|false)\}', f.read())
    fails = 0
    for name, merge, want in table:
        r = subprocess.run([os.path.join(bindir, 'config_check_cmd'), '-config_dir', os.path.join(CONFIGS, name),
                            '-merge_domain_configs=' + merge], capture_output=True)
        if (r.returncode == 0) != (want == 'true'):
            fails += 1
            print('  config %s: accepted %s, the table says %s' % (name, r.returncode == 0, want))
    print('configs: %d cases, %d differ' % (len(table), fails))
    return fails


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bindir, which = sys.argv[1], sys.argv[2:]
    fails = 0
    if not which or 'configs' in which:
        fails += check_configs(bindir)
    paths = [os.path.join(SCENARIOS, w) for w in which if w != 'configs'] or ([] if which else sorted(glob.glob(SCENARIOS + '/*.yaml')))
    answers = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(paths))) as pool:
        for n, f, text in pool.map(lambda p: run_scenario(p, bindir), paths):
            print(text)
            answers, fails = answers + n, fails + f
    if paths:
        print('scenarios: %d answers, %d differ' % (answers, fails))
    sys.exit(1 if fails else 0)


if __name__ == '__main__':
    main()

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
    scripts/envoyproxy-oracle.py --portero bin/portero --jobs 3 /tmp/erl/bin   # Portero beside it

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
to a minute for its offset (--jobs N runs N at a time: on a loaded
machine a scenario's steps must still fall in the seconds it meant).

With --portero BIN, Portero's binary runs beside it as ratelimit (a symlink
to BIN) with the same environment, each on its own redis-server (and a
second one under REDIS_PERSECOND), EXPIRATION_JITTER_MAX_SECONDS=0: every
step goes to both, both answers must be the scenario's, and after each
step both Redis must hold the same keys with the same values and TTLs
(within a second). Probe steps ask both what is not a /json answer: the
gRPC health of a name (probe: {grpc_health: NAME[, tls_client: wildcard|
exact|other]}, with curl over HTTP/2; {tls} in the environment is a
directory of certificates made with openssl) or a debug port path
(probe: {debug: PATH}, whose answer must hold the lines listed). Exit
status 1 when anything differs.
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


def redis_dump(port):
    """Every key of the Redis on port with its value and TTL, read in one
    pipeline (so that a per-second key cannot expire in between)."""
    with socket.create_connection(('127.0.0.1', port), timeout=5) as c:
        f = c.makefile('rwb')

        def send(*cmds):
            for cmd in cmds:
                f.write(b'*%d\r\n' % len(cmd) + b''.join(b'$%d\r\n%s\r\n' % (len(a), a) for a in (x.encode() for x in cmd)))
            f.flush()
            return [read() for _ in cmds]

        def read():
            line = f.readline().rstrip(b'\r\n')
            kind, rest = line[:1], line[1:]
            if kind == b'*':
                return [read() for _ in range(int(rest))]
            if kind == b'$':
                if int(rest) < 0:
                    return None
                data = f.read(int(rest) + 2)[:-2]
                return data.decode()
            if kind == b':':
                return int(rest)
            return rest.decode()
        keys = sorted(send(['KEYS', '*'])[0])
        replies = send(*[c for k in keys for c in (['GET', k], ['TTL', k])])
    # A key that expired between KEYS and GET (a per-second one) is gone.
    return {k: (replies[2 * i], replies[2 * i + 1]) for i, k in enumerate(keys) if replies[2 * i] is not None}


def redis_diff(a, b):
    """Keys, values and TTLs (within a second: the two were called one
    after the other) that differ between two dumps."""
    bad = []
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b or a[k][0] != b[k][0] or abs(a[k][1] - b[k][1]) > 1:
            bad.append('%s: envoyproxy %s, portero %s' % (k, a.get(k), b.get(k)))
    return bad


def make_tls(tmp):
    """A CA, a server certificate for 127.0.0.1 and localhost, and client
    certificates whose DNS SAN is *.ingress.svc (wildcard),
    envoy.ingress.svc (exact) and other.example (other), for the {tls}
    files of a scenario's environment."""
    d = os.path.join(tmp, 'tls')
    os.makedirs(d)

    def run(*args):
        subprocess.run(['openssl'] + list(args), check=True, capture_output=True, cwd=d)
    run('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt',
        '-days', '1', '-subj', '/CN=oracle CA')
    for name, san, usage in [('server', 'DNS:localhost,IP:127.0.0.1', 'serverAuth'), ('wildcard', 'DNS:*.ingress.svc', 'clientAuth'),
                             ('exact', 'DNS:envoy.ingress.svc', 'clientAuth'), ('other', 'DNS:other.example', 'clientAuth')]:
        run('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', name + '.key', '-out', name + '.csr',
            '-subj', '/CN=' + name)
        with open(os.path.join(d, name + '.ext'), 'w') as f:
            f.write('subjectAltName=%s\nextendedKeyUsage=%s\n' % (san, usage))
        run('x509', '-req', '-in', name + '.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', name + '.crt',
            '-days', '1', '-extfile', name + '.ext')
    return d


def grpc_health(port, service, tls=None, client=None):
    """grpc.health.v1.Health/Check over HTTP/2 with curl: SERVING,
    NOT_SERVING, or what failed (a refused handshake)."""
    msg = b'\x0a' + bytes([len(service)]) + service.encode() if service else b''
    body = b'\x00' + len(msg).to_bytes(4, 'big') + msg
    scheme = 'https' if tls else 'http'
    cmd = ['curl', '-sS', '--max-time', '5', '-o', '-', '-H', 'content-type: application/grpc', '-H', 'te: trailers',
           '--data-binary', '@-', scheme + '://127.0.0.1:%d/grpc.health.v1.Health/Check' % port]
    cmd[1:1] = ['--http2'] if tls else ['--http2-prior-knowledge']
    if tls:
        cmd[1:1] = ['--cacert', os.path.join(tls, 'ca.crt')]
        if client:
            cmd[1:1] = ['--cert', os.path.join(tls, client + '.crt'), '--key', os.path.join(tls, client + '.key')]
    r = subprocess.run(cmd, input=body, capture_output=True)
    if r.returncode != 0:
        return 'refused'
    out = r.stdout[5:]
    return {b'\x08\x01': 'SERVING', b'\x08\x02': 'NOT_SERVING'}.get(out, 'UNKNOWN(%r)' % out)


def probe(side, p, tls):
    """The answer of a probe step (see the scenarios' probe:)."""
    if 'debug' in p:
        try:
            with urllib.request.urlopen('http://127.0.0.1:%d%s' % (side['debug'], p['debug']), timeout=5) as r:
                return {'status': r.status, 'lines': r.read().decode().splitlines()}
        except urllib.error.HTTPError as e:
            return {'status': e.code, 'lines': e.read().decode().splitlines()}
    if 'grpc_health' in p:
        return grpc_health(side['grpc'], p['grpc_health'], tls if p.get('tls_client') is not None else None, p.get('tls_client'))
    raise ValueError('unknown probe %r' % p)


def probe_matches(got, want):
    """A probe's answer against the scenario's: the debug index must hold
    every line the scenario lists (Portero's lists its own endpoints too)."""
    if isinstance(want, dict) and isinstance(got, dict):
        return got['status'] == want['status'] and all(l in got['lines'] for l in want.get('lines', []))
    return got == want


def start_side(cmd, env, tmp, name):
    """One service (envoyproxy/ratelimit's service_cmd, or Portero run as
    ratelimit) on its own redis-server(s) and ports."""
    side = {'name': name, 'procs': []}

    def redis():
        port = free_port()
        side['procs'].append(subprocess.Popen(['redis-server', '--port', str(port), '--bind', '127.0.0.1', '--save', '',
                                               '--appendonly', 'no'], stdout=subprocess.DEVNULL))
        wait_port(port)
        return port
    side['redis'] = [redis()]
    side['http'], side['grpc'], side['debug'] = free_port(), free_port(), free_port()
    e = dict(os.environ)
    e.update({'RUNTIME_ROOT': os.path.join(tmp, 'current'), 'RUNTIME_SUBDIRECTORY': 'ratelimit', 'RUNTIME_WATCH_ROOT': 'false',
              'HOST': '127.0.0.1', 'PORT': str(side['http']), 'GRPC_HOST': '127.0.0.1', 'GRPC_PORT': str(side['grpc']),
              'DEBUG_HOST': '127.0.0.1', 'DEBUG_PORT': str(side['debug']), 'REDIS_SOCKET_TYPE': 'tcp',
              'REDIS_URL': '127.0.0.1:%d' % side['redis'][0], 'USE_STATSD': 'false', 'LOG_LEVEL': 'error',
              'FORCE_START_WITHOUT_INITIAL_CONFIG': 'true', 'EXPIRATION_JITTER_MAX_SECONDS': '0'})
    if str(env.get('REDIS_PERSECOND', '')).lower() == 'true':
        side['redis'].append(redis())
        e.update({'REDIS_PERSECOND_SOCKET_TYPE': 'tcp', 'REDIS_PERSECOND_URL': '127.0.0.1:%d' % side['redis'][1]})
    e.update({k: str(v).replace('{tls}', os.path.join(tmp, 'tls')) for k, v in env.items()})
    side['procs'].append(subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for _ in range(100):
        try:
            socket.create_connection(('127.0.0.1', side['http']), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return side


def run_variant(path, sc, vi, bindir, portero):
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
    tls = make_tls(tmp) if any('{tls}' in str(v) for v in env.values()) else None

    def write(files):
        for name, content in (files or {}).items():
            p = os.path.join(cfg, name)
            if content is None:
                os.remove(p)
            else:
                with open(p, 'w') as f:
                    f.write(content)

    write(sc.get('files'))
    sides = [start_side([os.path.join(bindir, 'service_cmd')], env, tmp, 'envoyproxy')]
    if portero:
        link = os.path.join(tmp, 'bin', 'ratelimit')
        os.makedirs(os.path.dirname(link))
        os.symlink(os.path.abspath(portero), link)
        sides.append(start_side([link], env, tmp, 'portero'))
    out, n, fails, keys = [], 0, 0, 0
    try:
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
            where = 'step %d (%s)' % (i, step.get('note', ''))
            if 'probe' in step:
                for side in sides:
                    n += 1
                    got = probe(side, step['probe'], tls)
                    if not probe_matches(got, step['want']):
                        fails += 1
                        out.append('  %s %s: probe %s = %s, want %s' % (side['name'], where, step['probe'], got, step['want']))
                continue
            if step.get('grpc_only'):
                continue
            for _ in range(max(step.get('times') or 1, 1)):
                for side in sides:
                    n += 1
                    f = check_json(side, step, start, at, where)
                    if f:
                        fails += 1
                        out.append(f)
            if portero:
                for r in range(len(sides[0]['redis'])):
                    a, b = redis_dump(sides[0]['redis'][r]), redis_dump(sides[1]['redis'][r])
                    keys += len(a)
                    for d in redis_diff(a, b):
                        fails += 1
                        out.append('  %s: redis %d: %s' % (where, r, d))
    finally:
        for side in sides:
            for p in side['procs']:
                p.kill()
                p.wait()
        shutil.rmtree(tmp)
    out.insert(0, '%s variant %d: %d answers, %d Redis keys compared, %d differ' % (os.path.basename(path), vi, n, keys, fails))
    return n, fails, '\n'.join(out)


def check_json(side, step, start, at, where):
    """Posts a step's request to one side's /json: its difference from the
    scenario's answer, or None."""
    url = 'http://127.0.0.1:%d' % side['http']
    before = int(time.time())
    code, body = post(url + '/json', step['request'])
    after = int(time.time())
    where = '%s %s' % (side['name'], where)
    if step.get('error'):
        return None if code == 400 else '  %s: %d %s, want 400' % (where, code, body[:300])
    want = json.loads(json.dumps(step['response']))
    wbad = big_units_off(want, [int(start.timestamp() + at)])
    try:
        got = json.loads(body)
        gbad = big_units_off(got, sorted({before, after}))
    except ValueError:
        got, gbad = body, []
    wcode = 429 if want.get('overallCode') == 'OVER_LIMIT' else 200
    if wbad or gbad or code != wcode or zeroless(got) != zeroless(want):
        return '  %s:\n    got  %d %s\n    want %d %s%s' % (where, code, json.dumps(zeroless(got))[:800], wcode,
                                                         json.dumps(zeroless(want))[:800],
                                                         ' (durations: scenario %s, real clock %s)' % (wbad, gbad) if wbad or gbad else '')
    return None


def run_scenario(path, bindir, portero):
    with open(path) as f:
        sc = yaml.safe_load(f)
    res = [run_variant(path, sc, vi, bindir, portero) for vi in range(len(sc.get('variants') or [{}]))]
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
    args = sys.argv[1:]
    portero, jobs = None, 0
    while len(args) >= 2 and args[0] in ('--portero', '--jobs'):
        if args[0] == '--portero':
            portero = args[1]
        else:
            jobs = int(args[1])
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    bindir, which = args[0], args[1:]
    fails = 0
    if not which or 'configs' in which:
        fails += check_configs(bindir)
    paths = [os.path.join(SCENARIOS, w) for w in which if w != 'configs'] or ([] if which else sorted(glob.glob(SCENARIOS + '/*.yaml')))
    answers = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or max(1, len(paths))) as pool:
        for n, f, text in pool.map(lambda p: run_scenario(p, bindir, portero), paths):
            print(text)
            answers, fails = answers + n, fails + f
    if paths:
        print('scenarios: %d answers, %d differ' % (answers, fails))
    sys.exit(1 if fails else 0)


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Writes access.log.gz: a week of an API's nginx log (2026-01-05 to 01-11),
in the log_format of nginx.conf beside it, for docs/operations.md's replay
walk-through. Deterministic: the same file at every run."""
import gzip, random, datetime

rng = random.Random(15)
start = datetime.datetime(2026, 1, 5, tzinfo=datetime.timezone.utc)
lines = []

def line(t, ip, method, path, status, key, rt):
    stamp = t.strftime('%d/%b/%Y:%H:%M:%S +0000')
    return (f'{ip} - - [{stamp}] "{method} {path} HTTP/1.1" {status} {rng.randint(90, 4000)} "-" '
            f'"client/2.1" "{key or "-"}" {rt:.3f}')

for day in range(7):
    d0 = start + datetime.timedelta(days=day)
    weekday = day < 5
    # globex: steady, a request every 40-80 s all day.
    t = d0
    while t < d0 + datetime.timedelta(days=1):
        lines.append((t, line(t, '198.51.100.20', 'GET', '/v1/orders', 200, 'globex', rng.uniform(0.01, 0.2))))
        t += datetime.timedelta(seconds=rng.randint(40, 80))
    # acme: bursts of 25-40 requests in one second, at 09:00 on weekdays
    # (a nightly sync moved to the morning), and a few calls an hour.
    for h in range(24):
        for _ in range(3):
            t = d0 + datetime.timedelta(hours=h, seconds=rng.randint(0, 3599))
            lines.append((t, line(t, '203.0.113.5', 'GET', '/v1/items', 200, 'acme', rng.uniform(0.01, 0.2))))
    if weekday:
        for b in range(3):
            t0 = d0 + datetime.timedelta(hours=9, minutes=b * 20)
            for i in range(rng.randint(25, 40)):
                t = t0 + datetime.timedelta(milliseconds=rng.randint(0, 999))
                lines.append((t, line(t, '203.0.113.5', 'POST', '/v1/items/sync', 200, 'acme', rng.uniform(0.01, 0.05))))
    # initech: a report job; on Wednesday it runs three times.
    runs = 3 if day == 2 else 1
    for r in range(runs):
        t = d0 + datetime.timedelta(hours=2 + r * 6)
        for i in range(700):
            lines.append((t, line(t, '192.0.2.44', 'GET', f'/v1/reports/{i}', 200, 'initech', rng.uniform(0.05, 0.4))))
            t += datetime.timedelta(milliseconds=rng.randint(150, 400))
    # anonymous browsers of the public catalogue.
    for _ in range(150):
        t = d0 + datetime.timedelta(seconds=rng.randint(0, 86399))
        ip = f'192.0.2.{rng.randint(100, 140)}'
        lines.append((t, line(t, ip, 'GET', '/v1/catalogue', 200, None, rng.uniform(0.01, 0.1))))
# A scanner speaking TLS to the plain port, as every public log has.
lines.append((start + datetime.timedelta(days=3, hours=4), '203.0.113.99 - - [08/Jan/2026:04:00:00 +0000] "\\x16\\x03\\x01\\x02\\x00\\x01" 400 157 "-" "-" "-" 0.001'))
lines.sort(key=lambda x: x[0])
with gzip.GzipFile('access.log.gz', 'wb', mtime=0) as f:
    for _, l in lines:
        f.write((l + '\n').encode())
print(len(lines), 'lines')

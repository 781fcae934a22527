package main

// The zone database, built in: calendar quotas name IANA zones
// (500000/day tz Europe/Madrid), and a minimal container image may have no
// /usr/share/zoneinfo. The system's database is still preferred when
// present; this adds about 450 KB to the binary.
import _ "time/tzdata"

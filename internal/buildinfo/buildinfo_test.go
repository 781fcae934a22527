package buildinfo

import (
	"encoding/json"
	"runtime/debug"
	"testing"
)

// TestFrom: the fields /api/version shows (as JSON) and the line
// `portero --version` prints come from the same build settings.
func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "d4d2e84bf9e2"}, {Key: "vcs.time", Value: "2026-12-01T12:45:54Z"}, {Key: "vcs.modified", Value: "true"}}}
	in := From(bi, true)
	js, err := json.Marshal(in)
	if want := `{"version":"(devel)","revision":"d4d2e84bf9e2","time":"2026-12-01T12:45:54Z","modified":true,"goversion":"go1.26.8"}`; err != nil || string(js) != want {
		t.Errorf("JSON = %s, %v; want %s", js, err, want)
	}
	if got, want := in.String(), "portero (devel), revision d4d2e84bf9e2 (modified), 2026-12-01T12:45:54Z, go1.26.8"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := From(nil, false); got.Known || got.Version != "(devel)" || got.String() != "portero (no build information)" {
		t.Errorf("From(nil, false) = %+v, %q", got, got.String())
	}
	if got := Read(); !got.Known || got.GoVersion == "" {
		t.Errorf("Read() = %+v: a test binary has build information", got)
	}
}

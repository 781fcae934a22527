package nginxtest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	s := Start(t, `
    server {
        listen {{LISTEN}};
        location / { return 200 "hello from nginx\n"; }
    }`)
	resp, err := http.Get(s.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello from nginx\n" || !strings.HasPrefix(resp.Header.Get("Server"), "nginx") {
		t.Errorf("GET / = %d %q (Server %q)", resp.StatusCode, body, resp.Header.Get("Server"))
	}
}

func TestRequired(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("PORTERO_REQUIRE_NGINX", "")
	if Required() {
		t.Error("Required() = true without CI or PORTERO_REQUIRE_NGINX")
	}
	t.Setenv("PORTERO_REQUIRE_NGINX", "1")
	if !Required() {
		t.Error("Required() = false with PORTERO_REQUIRE_NGINX=1")
	}
	t.Setenv("PORTERO_REQUIRE_NGINX", "")
	t.Setenv("CI", "true")
	if !Required() {
		t.Error("Required() = false with CI=true")
	}
}

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocLinks: every mention of docs/NAME.md in the repository's files,
// and every relative link to a .md file in its Markdown, names a file that
// exists (tests aside; examples/nginx/portero.conf sent readers to a docs/proxies.md
// that never was).
func TestDocLinks(t *testing.T) {
	root := "../.."
	mention := regexp.MustCompile(`\bdocs/[A-Za-z0-9_-]+\.md\b`)
	link := regexp.MustCompile(`\]\(([^)#:\s]+\.md)(#[^)]*)?\)`)
	checked := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && p != root || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, "_test.go") {
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".yaml", ".yml", ".conf", ".service", "":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range mention.FindAllString(string(b), -1) {
			checked++
			if _, err := os.Stat(filepath.Join(root, m)); err != nil {
				t.Errorf("%s mentions %s, which does not exist", p, m)
			}
		}
		if filepath.Ext(p) == ".md" {
			for _, m := range link.FindAllStringSubmatch(string(b), -1) {
				checked++
				if _, err := os.Stat(filepath.Join(filepath.Dir(p), m[1])); err != nil {
					t.Errorf("%s links to %s, which does not exist", p, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no link checked")
	}
}

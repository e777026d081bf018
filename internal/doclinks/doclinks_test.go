// Package doclinks checks the repository's Markdown: every relative link of every .md
// file (README.md, ARCHITECTURE.md, docs/, bench/, abi/SPEC.md, the examples', the
// deploy files' and the guest SDKs' READMEs) names a file or directory that exists,
// and its #fragment, into a Markdown file, names one of that file's headings, by
// GitHub's rule for heading anchors. Links to other sites (http:, https:, mailto:) and
// links inside code blocks or code spans are not checked.
package doclinks

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/internal/testwasm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRepositoryLinksResolve fails for every relative link of the repository's
// Markdown files that names a missing file, a path outside the repository, or a
// heading its target does not have.
func TestRepositoryLinksResolve(t *testing.T) {
	root := testwasm.RepoRoot()
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "ARCHITECTURE.md", "docs/design.md", "abi/SPEC.md"} {
		if !contains(files, filepath.Join(root, filepath.FromSlash(want))) {
			t.Errorf("%s is not among the Markdown files checked", want)
		}
	}
	problems, err := check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheckFindsBrokenLinks shows the check failing: a repository in a temporary
// directory with one link of each kind, good and broken.
func TestCheckFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Demo\n\n"+
		"Good: [ops](docs/ops.md), [its section](docs/ops.md#rolling-restarts), [here](#the-demo-section),\n"+
		"[a folder](docs/), [code](main.go), [a line](main.go#L3), [a site](https://example.com/x.md#nope).\n"+
		"Broken: [gone](docs/gone.md) and [no heading](docs/ops.md#kubernetes).\n"+
		"Also broken: [outside](../outside/NOTES.md), [no such section here](#nowhere), ![a picture](docs/pic.png).\n"+
		"Not checked: `[in a span](docs/span.md)`. Broken, over two lines: [a link\ntext](docs/two.md).\n\n"+
		"```md\n[in a block](docs/block.md)\n```\n\n"+
		"## The demo section\n\n"+
		"[ref]: docs/ref.md\n")
	write("docs/ops.md", "# Operations\n\n## Rolling restarts\n\nBack to [the top](../README.md#demo).\n")
	write("main.go", "package main\n\nfunc main() {}\n")

	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:5: docs/gone.md: no such file",
		"README.md:5: docs/ops.md#kubernetes: docs/ops.md has no heading with the anchor kubernetes",
		"README.md:6: ../outside/NOTES.md: outside the repository",
		"README.md:6: #nowhere: README.md has no heading with the anchor nowhere",
		"README.md:6: docs/pic.png: no such file",
		"README.md:8: docs/two.md: no such file",
		"README.md:16: docs/ref.md: no such file",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}

func TestAnchorsFollowGitHubsRule(t *testing.T) {
	text := "# shardhost\n" +
		"## Beside Proto.Actor (`make bench-peers`)\n" +
		"### What a failure loses\n" +
		"## Write, deploy and talk to your own entity\n" +
		"## What an entity can do (ABI v1)\n" +
		"## Notes\n## Notes\n" +
		"## [Linked](x.md) *and* **bold** ##\n" +
		"## snake_case and dash-ed — µs\n" +
		"```\n# not a heading\n```\n" +
		"#not-a-heading-either\n"
	var got []string
	for a := range anchors(text) {
		got = append(got, a)
	}
	sort.Strings(got)
	want := []string{"beside-protoactor-make-bench-peers", "linked-and-bold", "notes", "notes-1", "shardhost",
		"snake_case-and-dash-ed--µs", "what-a-failure-loses", "what-an-entity-can-do-abi-v1",
		"write-deploy-and-talk-to-your-own-entity"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("anchors %q\nwant    %q", got, want)
	}
}

// markdownFiles lists the .md files under root, leaving out hidden directories (.git,
// .ci), build output (bin) and the dev cluster's data (.shardhost).
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// check returns one line per broken relative link of files, which are under root:
// "FILE:LINE: TARGET: what is wrong", FILE relative to root.
func check(root string, files []string) ([]string, error) {
	anchorsOf := map[string]map[string]bool{}
	headings := func(path string) (map[string]bool, error) {
		if a, ok := anchorsOf[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := anchors(string(b))
		anchorsOf[path] = a
		return a, nil
	}
	var problems []string
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		for _, l := range links(string(b)) {
			report := func(format string, args ...any) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", rel, l.line, l.target, fmt.Sprintf(format, args...)))
			}
			if external(l.target) {
				continue
			}
			pathPart, fragment, _ := strings.Cut(l.target, "#")
			p, err := url.PathUnescape(pathPart)
			if err != nil {
				report("bad escape: %v", err)
				continue
			}
			target := file
			switch {
			case p == "":
			case strings.HasPrefix(p, "/"):
				target = filepath.Join(root, filepath.FromSlash(p))
			default:
				target = filepath.Join(filepath.Dir(file), filepath.FromSlash(p))
			}
			if r, err := filepath.Rel(root, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				report("outside the repository")
				continue
			}
			info, err := os.Stat(target)
			if err != nil {
				report("no such file")
				continue
			}
			if fragment == "" || info.IsDir() || !strings.HasSuffix(target, ".md") {
				continue // a fragment into code (#L12) or a picture is not checked
			}
			frag, err := url.PathUnescape(fragment)
			if err != nil {
				report("bad escape: %v", err)
				continue
			}
			a, err := headings(target)
			if err != nil {
				return nil, err
			}
			if !a[strings.ToLower(frag)] {
				name, _ := filepath.Rel(root, target)
				report("%s has no heading with the anchor %s", filepath.ToSlash(name), frag)
			}
		}
	}
	return problems, nil
}

// external reports whether a link target names another site or scheme (https:,
// mailto:, //host).
func external(target string) bool {
	return strings.HasPrefix(target, "//") || schemeRE.MatchString(target)
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// link is a link target and the line it is on.
type link struct {
	line   int
	target string
}

var (
	// inlineLinkRE matches [text](target) and ![alt](target), with an optional title.
	inlineLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDefRE matches a reference definition: [label]: target.
	refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// fenceRE matches the opening or closing line of a fenced code block.
	fenceRE = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
)

// links returns the link targets of a Markdown text, outside code blocks and spans. A
// link's text may run over several lines; its line is the line of its target.
func links(text string) []link {
	var out []link
	prose := make([]string, strings.Count(text, "\n")+1)
	eachProseLine(text, func(n int, line string) {
		line = blankCodeSpans(line)
		prose[n-1] = line
		if m := refDefRE.FindStringSubmatch(line); m != nil {
			out = append(out, link{n, m[1]})
		}
	})
	joined := strings.Join(prose, "\n")
	for _, m := range inlineLinkRE.FindAllStringSubmatchIndex(joined, -1) {
		if target := joined[m[2]:m[3]]; target != "" {
			out = append(out, link{strings.Count(joined[:m[2]], "\n") + 1, target})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].line < out[j].line })
	return out
}

// eachProseLine calls f with each line (numbered from 1) that is not inside a fenced
// code block.
func eachProseLine(text string, f func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case m[1][0] == fence[0] && len(m[1]) >= len(fence) && strings.TrimSpace(line[strings.Index(line, m[1])+len(m[1]):]) == "":
				fence = ""
			}
			continue
		}
		if fence == "" {
			f(i+1, line)
		}
	}
}

// blankCodeSpans replaces each code span of line (text between two runs of as many
// backticks) by spaces, so that nothing in it reads as a link.
func blankCodeSpans(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == '`' {
			j++
		}
		ticks := string(b[i:j])
		end := strings.Index(string(b[j:]), ticks)
		if end < 0 {
			i = j
			continue
		}
		end += j + len(ticks)
		for k := i; k < end; k++ {
			b[k] = ' '
		}
		i = end
	}
	return string(b)
}

var (
	atxHeadingRE = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdLinkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE    = regexp.MustCompile(`<[^>]+>`)
)

// anchors returns the fragments a Markdown text's headings answer to, by GitHub's
// rule: the heading's text as rendered, lowercased, with every character but letters,
// digits, marks, '_', '-' and ' ' removed, and spaces turned into '-'; a heading whose
// anchor was taken already gets -1, -2, ... Explicit <a name="..."> anchors count too.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	eachProseLine(text, func(_ int, line string) {
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			out[strings.ToLower(m[1])] = true
		}
		m := atxHeadingRE.FindStringSubmatch(line)
		if m == nil {
			return
		}
		slug := slugify(m[1])
		if slug == "" {
			return
		}
		if n, dup := seen[slug]; dup {
			seen[slug] = n + 1
			slug += "-" + strconv.Itoa(n+1)
		} else {
			seen[slug] = 0
		}
		out[slug] = true
	})
	return out
}

// slugify is GitHub's anchor of a heading's Markdown text.
func slugify(heading string) string {
	s := mdLinkTextRE.ReplaceAllString(heading, "$1")
	s = htmlTagRE.ReplaceAllString(s, "")
	s = strings.NewReplacer("`", "", "**", "", "*", "").Replace(s)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

package evalplot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDrawAndReport(t *testing.T) {
	dir := t.TempDir()
	if _, err := Report(dir); !errors.Is(err, ErrNoFigures) {
		t.Fatalf("report of an empty directory: %v", err)
	}
	line := Figure{Name: "fig6a", Title: "Figure 6a: YCSB A", XLabel: "Throughput [ops/s]", YLabel: "Latency [ms]",
		Series: []Series{{Name: "preliminary", X: []float64{1, 2, 3}, Y: []float64{20, 21, 25}, Dashed: true},
			{Name: "final", X: []float64{1, 2, 3}, Y: []float64{40, 42, 50}}},
		Caption: "paper: 20 ms gap", Command: "correctables bench fig6"}
	bar := Figure{Name: "fig8", Title: "Figure 8: bandwidth", YLabel: "bytes/op", Categories: []string{"A", "B"},
		Series: []Series{{Name: "weak", Y: []float64{100, 90}}, {Name: "invoke", Y: []float64{150, 120}}}}
	for _, f := range []Figure{line, bar} {
		if err := Draw(dir, f); err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{"svg", "png", "json"} {
			st, err := os.Stat(filepath.Join(dir, f.Name+"."+ext))
			if err != nil || st.Size() == 0 {
				t.Fatalf("%s.%s: %v", f.Name, ext, err)
			}
		}
		svg, _ := os.ReadFile(filepath.Join(dir, f.Name+".svg"))
		if !strings.Contains(string(svg), "Figure") {
			t.Fatalf("%s.svg has no title", f.Name)
		}
	}
	if err := WriteCSV(dir, "fig8", []string{"workload", "bytes"}, [][]string{{"A", "100"}}); err != nil {
		t.Fatal(err)
	}
	n, err := Report(dir)
	if err != nil || n != 2 {
		t.Fatalf("report: %d figures, %v", n, err)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	for _, want := range []string{"fig6a.svg", "fig8.svg", "paper: 20 ms gap", "correctables bench fig6", "fig8.csv"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	// Bad figures are refused and write nothing.
	for _, f := range []Figure{
		{Name: "", Series: line.Series},
		{Name: "a/b", Series: line.Series},
		{Name: "empty"},
		{Name: "ragged", Series: []Series{{X: []float64{1}, Y: []float64{1, 2}}}},
		{Name: "bars", Categories: []string{"A"}, Series: []Series{{Y: []float64{1, 2}}}},
	} {
		if err := Draw(dir, f); err == nil {
			t.Errorf("figure %q accepted", f.Name)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ragged.svg")); err == nil {
		t.Error("a refused figure was written")
	}
}

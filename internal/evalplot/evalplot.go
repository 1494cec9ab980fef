// Package evalplot writes the results of the evaluation benchmarks
// (`correctables bench fig6|fig7|fig8|queue|app`): raw rows as CSV, and the
// figure as SVG and PNG drawn with gonum.org/v1/plot, titled and labelled
// like the figures of Correctables §6, plus a small JSON description that
// `correctables bench report` gathers into one HTML page.
package evalplot

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one line of a line chart, or one group member of a bar chart
// (Y[i] is its bar in category i).
type Series struct {
	Name string
	X, Y []float64
	// Dashed draws the line dashed (the paper's preliminary views).
	Dashed bool
}

// Figure is one figure.
type Figure struct {
	// Name is the file stem: Name.csv, Name.svg, Name.png, Name.json.
	Name string
	// Title, XLabel, YLabel label the figure as the paper does.
	Title, XLabel, YLabel string
	// Categories, if set, make a grouped bar chart: one group per category,
	// one bar per series. Otherwise it is a line chart of X against Y.
	Categories []string
	Series     []Series
	// LogY draws the Y axis on a log scale.
	LogY bool
	// Caption says what the figure shows beside the paper's number;
	// Command is the command that produced it. Both go to the report.
	Caption, Command string
}

// Meta is what the report knows of a figure (Name.json).
type Meta struct {
	Name, Title, Caption, Command string
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
}

// Color returns the i-th colour of the palette.
func Color(i int) color.Color { return palette[i%len(palette)] }

// WriteCSV writes dir/name.csv.
func WriteCSV(dir, name string, header []string, rows [][]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name+".csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.Write(header); err != nil {
		f.Close()
		return err
	}
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Draw writes dir/Name.svg, dir/Name.png and dir/Name.json.
func Draw(dir string, fig Figure) error {
	if fig.Name == "" || strings.ContainsAny(fig.Name, `/\`) {
		return fmt.Errorf("evalplot: bad figure name %q", fig.Name)
	}
	if len(fig.Series) == 0 {
		return fmt.Errorf("evalplot: figure %s has no series", fig.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = fig.Title
	p.X.Label.Text = fig.XLabel
	p.Y.Label.Text = fig.YLabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	if fig.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if len(fig.Categories) > 0 {
		if err := bars(p, fig); err != nil {
			return err
		}
	} else if err := lines(p, fig); err != nil {
		return err
	}
	// Room above the data for the legend, which sits top left.
	if !fig.LogY {
		p.Y.Min = min(p.Y.Min, 0)
		p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)*(1.1+0.08*float64(len(fig.Series)))
	}
	w, h := 7*vg.Inch, 4.5*vg.Inch
	for _, ext := range []string{"svg", "png"} {
		if err := p.Save(w, h, filepath.Join(dir, fig.Name+"."+ext)); err != nil {
			return fmt.Errorf("evalplot: %s.%s: %w", fig.Name, ext, err)
		}
	}
	meta, err := json.MarshalIndent(Meta{Name: fig.Name, Title: fig.Title, Caption: fig.Caption, Command: fig.Command}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fig.Name+".json"), meta, 0o644)
}

func lines(p *plot.Plot, fig Figure) error {
	for i, s := range fig.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("evalplot: %s: series %q has %d x and %d y", fig.Name, s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j].X, xys[j].Y = s.X[j], s.Y[j]
			if fig.LogY && xys[j].Y <= 0 {
				xys[j].Y = 1e-3
			}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("evalplot: %s: %w", fig.Name, err)
		}
		c := Color(i)
		l.Color, pts.Color = c, c
		l.Width = vg.Points(1.5)
		pts.Shape = shapes[i%len(shapes)]
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
	}
	return nil
}

var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}}

func bars(p *plot.Plot, fig Figure) error {
	n := len(fig.Series)
	width := vg.Points(min(60, 300/float64(n*len(fig.Categories))))
	for i, s := range fig.Series {
		if len(s.Y) != len(fig.Categories) {
			return fmt.Errorf("evalplot: %s: series %q has %d values for %d categories", fig.Name, s.Name, len(s.Y), len(fig.Categories))
		}
		b, err := plotter.NewBarChart(plotter.Values(s.Y), width)
		if err != nil {
			return fmt.Errorf("evalplot: %s: %w", fig.Name, err)
		}
		b.Color = Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(n-1)/2) * width
		p.Add(b)
		p.Legend.Add(s.Name, b)
	}
	p.NominalX(fig.Categories...)
	return nil
}

// Report writes dir/index.html showing every figure in dir (each Name.json
// with its Name.svg), in name order, with its caption, command and a link
// to its CSV. It returns how many figures it found.
func Report(dir string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return 0, err
	}
	var figs []Meta
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		var m Meta
		if err := json.Unmarshal(b, &m); err != nil || m.Name == "" {
			continue // not one of ours
		}
		if _, err := os.Stat(filepath.Join(dir, m.Name+".svg")); err != nil {
			continue
		}
		figs = append(figs, m)
	}
	if len(figs) == 0 {
		return 0, fmt.Errorf("%w in %s (run a `correctables bench` figure command with --out %s first)", ErrNoFigures, dir, dir)
	}
	slices.SortFunc(figs, func(a, b Meta) int { return strings.Compare(a.Name, b.Name) })
	f, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return 0, err
	}
	if err := reportTmpl.Execute(f, figs); err != nil {
		f.Close()
		return 0, err
	}
	return len(figs), f.Close()
}

// ErrNoFigures is returned by Report for a directory without figures.
var ErrNoFigures = errors.New("evalplot: no figures")

var reportTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Correctables evaluation</title>
<style>body{font-family:sans-serif;max-width:60em;margin:auto;padding:1em}figure{margin:2em 0}img{max-width:100%}code{background:#eee;padding:0 .2em}</style>
</head><body>
<h1>Correctables evaluation (Correctables, OSDI'16, §6)</h1>
{{range .}}<figure id="{{.Name}}">
<h2>{{.Title}}</h2>
<img src="{{.Name}}.svg" alt="{{.Title}}">
<figcaption><p>{{.Caption}}</p><p><code>{{.Command}}</code> · <a href="{{.Name}}.csv">{{.Name}}.csv</a></p></figcaption>
</figure>
{{end}}</body></html>
`))

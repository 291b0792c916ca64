package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// series is one named set of samples.
type series struct {
	name string
	data []time.Duration
}

// save writes p to dir/file as a PNG; nothing when dir is empty.
func save(p *plot.Plot, dir, file string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plot dir: %w", err)
	}
	if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, file)); err != nil {
		return fmt.Errorf("save plot %s: %w", file, err)
	}
	return nil
}

// cdfPlot draws the empirical distribution of each series on a logarithmic time axis.
func cdfPlot(dir, file, title string, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds (log scale)"
	p.Y.Label.Text = "fraction of samples at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	for i, s := range ss {
		if len(s.data) == 0 {
			continue
		}
		d := slices.Clone(s.data)
		slices.Sort(d)
		pts := make(plotter.XYs, 0, 2*len(d))
		for j, v := range d {
			x := max(v.Seconds(), 1e-4)
			if j > 0 {
				pts = append(pts, plotter.XY{X: x, Y: float64(j) / float64(len(d))})
			}
			pts = append(pts, plotter.XY{X: x, Y: float64(j+1) / float64(len(d))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", file, err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 4)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", s.name, len(d)), l)
	}
	// Room on the right for the legend, below the lines' top.
	p.X.Min /= 1.5
	p.X.Max *= 4
	p.Legend.Top = false
	p.Legend.Left = false
	return save(p, dir, file)
}

// barGroup is one bar series over the categories.
type barGroup struct {
	name   string
	values []float64
}

// barPlot draws grouped bars: one group per category, one bar per barGroup.
func barPlot(dir, file, title, ylabel string, categories []string, groups []barGroup) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	w := vg.Points(60 / float64(max(len(groups), 1)))
	for i, g := range groups {
		bars, err := plotter.NewBarChart(plotter.Values(g.values), w)
		if err != nil {
			return fmt.Errorf("plot %s: %w", file, err)
		}
		bars.LineStyle.Width = vg.Length(0)
		bars.Color = plotutil.Color(i)
		bars.Offset = w * vg.Length(float64(i)-float64(len(groups)-1)/2)
		p.Add(bars)
		p.Legend.Add(g.name, bars)
	}
	p.Legend.Top = true
	p.NominalX(categories...)
	return save(p, dir, file)
}

// linePlot draws y over x for each named series of points.
func linePlot(dir, file, title, xlabel, ylabel string, names []string, pts []plotter.XYs) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	for i, xy := range pts {
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", file, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(names[i], l)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	return save(p, dir, file)
}

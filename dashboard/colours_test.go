package dashboard

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/matryer/is"
)

// srgb is a colour "#rrggbb" as linear-light RGB in 0..1.
func srgb(t *testing.T, hex string) [3]float64 {
	t.Helper()
	if len(hex) != 7 || hex[0] != '#' {
		t.Fatalf("colour %q is not #rrggbb", hex)
	}
	var c [3]float64
	for i := range c {
		v, err := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		if err != nil {
			t.Fatalf("colour %q: %v", hex, err)
		}
		s := float64(v) / 255
		if s <= 0.04045 {
			c[i] = s / 12.92
		} else {
			c[i] = math.Pow((s+0.055)/1.055, 2.4)
		}
	}
	return c
}

// luminance is WCAG's relative luminance.
func luminance(c [3]float64) float64 { return 0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2] }

// contrast is WCAG's contrast ratio of two colours (1 to 21).
func contrast(t *testing.T, a, b string) float64 {
	la, lb := luminance(srgb(t, a)), luminance(srgb(t, b))
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// deltaE is the CIE76 distance of two colours in CIELAB (D65): about 2 is
// just noticeable, below 20 two colours of small chips pass for one.
func deltaE(t *testing.T, a, b string) float64 {
	lab := func(hex string) [3]float64 {
		c := srgb(t, hex)
		x := (0.4124*c[0] + 0.3576*c[1] + 0.1805*c[2]) / 0.95047
		y := 0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2]
		z := (0.0193*c[0] + 0.1192*c[1] + 0.9505*c[2]) / 1.08883
		f := func(v float64) float64 {
			if v > 216.0/24389 {
				return math.Cbrt(v)
			}
			return (24389.0/27*v + 16) / 116
		}
		return [3]float64{116*f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))}
	}
	p, q := lab(a), lab(b)
	return math.Sqrt((p[0]-q[0])*(p[0]-q[0]) + (p[1]-q[1])*(p[1]-q[1]) + (p[2]-q[2])*(p[2]-q[2]))
}

// cssVar reads a custom property (--name: #rrggbb) of static/app.css.
func cssVar(t *testing.T, css, name string) string {
	t.Helper()
	m := regexp.MustCompile(`--` + name + `:\s*(#[0-9a-fA-F]{6})`).FindStringSubmatch(css)
	if m == nil {
		t.Fatalf("static/app.css defines no --%s", name)
	}
	return m[1]
}

// TestReservationColours: no reservation colour passes for the red of a
// dead host (the third one did: Tableau 10's red, ΔE 16 from it) or for a
// busy chip, reservations are told apart, and a free chip stands out from
// the page (its fill alone was 1.1:1 against it; its outline now meets
// WCAG's 3:1 for graphics).
func TestReservationColours(t *testing.T) {
	is := is.New(t)
	js, err := os.ReadFile("static/app.js")
	is.NoErr(err)
	cssb, err := os.ReadFile("static/app.css")
	is.NoErr(err)
	css := string(cssb)
	m := regexp.MustCompile(`const palette = \[([^\]]*)\]`).FindSubmatch(js)
	is.True(m != nil) // app.js defines the palette
	palette := regexp.MustCompile(`#[0-9a-fA-F]{6}`).FindAllString(string(m[1]), -1)
	is.Equal(len(palette), 10)

	dead, busy := cssVar(t, css, "dead"), cssVar(t, css, "busy")
	for i, c := range palette {
		if d := deltaE(t, c, dead); d < 40 {
			t.Errorf("reservation colour %d (%s) is %.0f ΔE from the dead-host red %s: want 40 or more", i+1, c, d, dead)
		}
		if d := deltaE(t, c, busy); d < 15 {
			t.Errorf("reservation colour %d (%s) is %.0f ΔE from the busy grey %s: want 15 or more", i+1, c, d, busy)
		}
		for j, o := range palette[:i] {
			if d := deltaE(t, c, o); d < 20 {
				t.Errorf("reservation colours %d (%s) and %d (%s) are %.0f ΔE apart: want 20 or more", j+1, o, i+1, c, d)
			}
		}
	}
	for _, bg := range []string{"#ffffff", "#f7f9fb"} { // a slice's card, the page
		if r := contrast(t, cssVar(t, css, "free-edge"), bg); r < 3 {
			t.Errorf("a free chip's outline %s has contrast %.2f:1 against %s: want 3:1 (WCAG 1.4.11)", cssVar(t, css, "free-edge"), r, bg)
		}
	}
}

module github.com/goray-dev/goray/dashboard/browsertest

go 1.26.0

require (
	github.com/chromedp/chromedp v0.23.1
	github.com/goray-dev/goray v0.1.0
	github.com/matryer/is v1.4.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/VictoriaMetrics/metrics v1.45.0 // indirect
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/google/wire v0.7.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/samber/lo v1.53.0 // indirect
	github.com/schollz/progressbar/v3 v3.19.1 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.47.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

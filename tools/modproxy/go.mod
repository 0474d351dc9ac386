module github.com/goray-dev/goray/tools/modproxy

go 1.26.0

require golang.org/x/mod v0.43.0

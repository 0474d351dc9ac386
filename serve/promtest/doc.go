// Package promtest checks goray serve's metrics with the Prometheus
// project's own text parser (github.com/prometheus/common/expfmt). It is a
// module of its own so that the parser and its protobuf dependency stay
// out of the root module's build; it has no code for users.
package promtest

// Package middleware wraps job handlers: func(job.Handler) job.Handler.
//
// The worker runs [Recover] and [Timeout] by default. Compose more with
// job.Chain or the worker's Middleware setting; the first is the outermost.
package middleware

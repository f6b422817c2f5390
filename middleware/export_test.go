package middleware

// The names, under the exported names the external tests use.
const (
	AttrAttempt          = attrAttempt
	AttrJobType          = attrJobType
	AttrLatenessMS       = attrLatenessMS
	AttrOutcome          = attrOutcome
	AttrRefused          = attrRefused
	EventDeadLettered    = eventDeadLettered
	LabelOutcome         = labelOutcome
	LabelQueue           = labelQueue
	LabelReason          = labelReason
	LabelType            = labelType
	MetricDead           = metricDead
	MetricDeadTrimmed    = metricDeadTrimmed
	MetricDeadUnarchived = metricDeadUnarchived
	MetricDue            = metricDue
	MetricDuration       = metricDuration
	MetricEnqueued       = metricEnqueued
	MetricHandled        = metricHandled
	MetricHeldByCap      = metricHeldByCap
	MetricHeldByKey      = metricHeldByKey
	MetricHeldByRate     = metricHeldByRate
	MetricLag            = metricLag
	MetricLateness       = metricLateness
	MetricProcessing     = metricProcessing
	MetricScheduled      = metricScheduled
	ScopeName            = scopeName
	System               = systemName
)

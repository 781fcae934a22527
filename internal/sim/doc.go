// Package sim runs Portero's experiments on a virtual clock: traces of
// requests replayed through any portero.Store (the in-memory store, or
// Redis), and the burst experiment, in which five algorithms receive the
// same 80 requests.
//
// Time is a parameter here as everywhere in Portero: a trace says when each
// request arrives, trace time 0 is Epoch (the Unix epoch), and nothing reads
// the wall clock, so every run of an experiment gives the same figures.
// Times are kept in whole nanoseconds and written as exact decimal seconds
// (FormatSeconds), so outputs can be compared byte for byte.
//
// Every experiment, here and in the packages below (retrysim, overloadsim,
// race, fleetsim), prints its figures as a Table and orders its events with
// Events (fleetsim, whose traffic is all known before it starts, sorts it
// once); the charts are drawn by package internal/chart.
package sim

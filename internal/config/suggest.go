package config

// Suggest returns the name of known closest to typed when it is close
// enough to be a misspelling of it, or "": the one "did you mean" of the
// project, for the command line's commands and flags as for the file's
// fields.
func Suggest(typed string, known []string) string { return suggest(typed, known) }

module github.com/portero-rl/portero

go 1.26

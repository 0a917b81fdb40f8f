// SPDX-License-Identifier: Apache-2.0

package api

// The List and Get methods of every kind the API carries (kinds_gen.go),
// from the generated Gateway service: run after api/edgeplane/v1's
// generation, as make generate does.
//go:generate go run ./kindgen -o kinds_gen.go

// SPDX-License-Identifier: Apache-2.0

package api

// LookupHost lets tests resolve listen addresses their own way.
var LookupHost = &lookupHost

// JSONOpsCount counts an Apply body's operations as REST does.
var JSONOpsCount = jsonOpsCount

// SourceOf is what a client address's connections are counted under.
var SourceOf = sourceOf

// SPDX-License-Identifier: Apache-2.0

// Package edgeplanev1 is the generated code of the edgeplane.v1 control
// API: messages, the gRPC service, its REST mapping and the OpenAPI
// document served at /openapi.json.
package edgeplanev1

//go:generate protoc -I . --plugin=protoc-gen-go=../../../bin/tools/protoc-gen-go --go_out=. --go_opt=paths=source_relative --plugin=protoc-gen-go-grpc=../../../bin/tools/protoc-gen-go-grpc --go-grpc_out=. --go-grpc_opt=paths=source_relative --plugin=protoc-gen-grpc-gateway=../../../bin/tools/protoc-gen-grpc-gateway --grpc-gateway_out=. --grpc-gateway_opt=paths=source_relative,grpc_api_configuration=gateway.yaml --plugin=protoc-gen-openapiv2=../../../bin/tools/protoc-gen-openapiv2 --openapiv2_out=. --openapiv2_opt=grpc_api_configuration=gateway.yaml,json_names_for_fields=false,disable_default_errors=false edgeplane.proto

import _ "embed"

// OpenAPI is the OpenAPI (Swagger 2.0) document of the REST mapping.
//
//go:embed edgeplane.swagger.json
var OpenAPI []byte

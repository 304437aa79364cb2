//go:build tools

// Package tools pins what scripts/gang-crds.sh builds and reads: controller-gen, and the
// Volcano API types it turns into Volcano's CRDs as Volcano's own build does.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
	_ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

"""KEDA's external scaler stubs (generated from proto/jobgate/keda/), served by the gateway."""

"""Static analysis for the Tuna-style cost model: PTX instruction profiles and occupancy."""

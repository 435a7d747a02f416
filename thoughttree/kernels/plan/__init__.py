"""Host-side planning (numpy): the tree-attention plan and the work items the kernels read."""

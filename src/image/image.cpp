// The image layer: filled in by the image-core branch.

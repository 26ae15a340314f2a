"""The static site: page data from the index, SVG charts, and the build."""
